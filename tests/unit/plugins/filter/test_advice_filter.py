# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter mig_layout_advice: Prometheus' matrix or a recorded file in, the advice and a committable catalog out,
one line for bad input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter.mig_layout_advice import FilterModule, mig_layout_advice
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import validate_document
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu

ROOT = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..')


@pytest.fixture(scope='module')
def shipped():
    with open(os.path.join(ROOT, 'roles', 'mig_layout', 'files', 'catalog.yml')) as handle:
        return yaml.safe_load(handle)['mig-configs']


def hosts():
    return [{'host': 'n1', 'gpus': [model_gpu('A100-SXM4-80GB').as_dict()]}]


def test_registered_and_reads_prometheus_samples(shipped):
    assert FilterModule().filters()['mig_layout_advice'] is mig_layout_advice
    # a 7g asked for all day, two days, hour-end stamps from 01:00
    series = [{'metric': {'resource': 'nvidia_com_mig_7g_80gb'}, 'values': [[3600 * (h + 1), '1'] for h in range(48)]}]
    advice = mig_layout_advice(series, hosts(), shipped, 'all-balanced')
    assert advice['days'] == 2
    model = advice['models'][0]
    assert (model['placed'], model['current_placed'], model['switches']) == (48.0, 0.0, 0)
    assert advice['awx_layout_switches'] == [{'layout': 'advised-0000', 'time': '00:00', 'timezone': 'UTC'}]
    configs = validate_document(advice['catalog'])
    # the current catalog stays beside the advice: a host on nighttime still finds it
    assert set(shipped) < set(configs) and 'advised-0000' in configs
    assert configs['advised-0000'][0]['mig-devices'] == {'7g.80gb': 1}


def test_reads_a_recorded_demand_file(shipped):
    recorded = {'days': 1, 'requests': [{'arrival': 0, 'hold': 86400, 'resource': 'nvidia.com/mig-7g.80gb'}]}
    advice = mig_layout_advice(recorded, hosts(), shipped, [{'layout': 'daytime', 'time': '08:00'}, {'layout': 'nighttime', 'time': '20:00'}])
    # one request, held all day: one placed request (its 24 device-hours weigh 1/24 each)
    assert advice['models'][0]['placed'] == 1.0 and advice['models'][0]['current_placed'] == 0.0


PROMETHEUS = [{'metric': {'resource': 'nvidia_com_gpu'}, 'values': [[3600, '1']]}]


def request(**fields):
    entry = {'arrival': 0, 'hold': 3600, 'resource': 'nvidia.com/mig-7g.80gb'}
    entry.update(fields)
    return {'days': 1, 'requests': [entry]}


@pytest.mark.parametrize('demand, current, message', [
    ('text', 'all-balanced', 'Prometheus query_range result .* got str'),
    ({'requests': []}, 'all-balanced', 'days'),
    (PROMETHEUS, 'no-such-layout', 'lacks'),
    # a recorded file whose top level is a list: its requests without {days, requests}
    ([{'arrival': 0, 'hold': 60, 'resource': 'nvidia.com/mig-7g.80gb'}], 'all-balanced', 'recorded demand file .* got a list of dict'),
    ([3, 4], 'all-balanced', 'got a list of int'),
    ([], 'all-balanced', 'no demand series'),
    ({'days': 1, 'requests': []}, 'all-balanced', 'lists no request'),
    (request(devices=-50), 'all-balanced', 'whole number of devices'),
    (request(devices=float('nan')), 'all-balanced', 'finite number'),
    (request(hold=float('inf')), 'all-balanced', 'finite number'),
    (request(resource='nvidia.com/mig-1g.12gb'), 'all-balanced', 'no request read is one the fleet can place'),
    (request(), {'min_gain': 2}, 'least gain'),
    (request(), {'serial': '0%'}, 'serial'),
    (request(), {'patience_minutes': -1}, 'patience'),
])
def test_bad_input_is_one_line(shipped, demand, current, message):
    settings = current if isinstance(current, dict) else {}
    with pytest.raises(AnsibleFilterError, match='mig_layout_advice: .*' + message) as error:
        mig_layout_advice(demand, hosts(), shipped, 'all-balanced' if settings else current, **settings)
    assert '\n' not in str(error.value)


def test_the_advice_accounts_for_every_request_read(shipped):
    recorded = {'days': 1, 'requests': [{'arrival': 0, 'hold': 3600, 'resource': 'nvidia.com/mig-7g.80gb'},
                                        {'arrival': 0, 'hold': 3600, 'resource': 'nvidia.com/mig-1g.12gb'},
                                        {'arrival': 0, 'hold': 3600, 'resource': 'nvidia.com/gpu'},
                                        {'arrival': 90000, 'hold': 3600, 'resource': 'nvidia.com/mig-7g.80gb'}]}
    advice = mig_layout_advice(recorded, hosts(), shipped, 'all-balanced')
    assert advice['requests'] == {'read': 4, 'hostable': {'nvidia.com/mig-7g.80gb': 1}, 'whole_gpu': 1,
                                  'unhostable': {'nvidia.com/mig-1g.12gb': 1}, 'unknown': {}, 'outside': 1}
    assert advice['summary'][0].startswith('requests read: 4 = 1 a MIG profile')


def test_the_replay_s_verdict_is_returned_and_printed(shipped):
    # one 7g asked all day, which all-balanced lacks: the single layout places it, no switch is proposed
    recorded = {'days': 1, 'requests': [{'arrival': 60, 'hold': 3600, 'resource': 'nvidia.com/mig-7g.80gb'}]}
    advice = mig_layout_advice(recorded, hosts(), shipped, 'all-balanced', serial='50%', forks=5, switch_seconds=35)
    assert advice['replayed']['current']['placed'] == 0 and advice['replayed']['single']['placed'] == 1
    assert (advice['choice'], advice['keep_current']) == ('single', False)
    assert any(line.endswith('a switch is a rollout of 1 hosts, serial 50%, forks 5, 35 s a host: 35 s') for line in advice['summary'])


def test_the_current_schedule_s_timezone_is_read(shipped):
    """playbooks/mig_advise.yml passes awx_schedule_timezone: an unknown one is refused in one line naming it."""
    switches = [{'layout': 'daytime', 'time': '08:00'}, {'layout': 'nighttime', 'time': '20:00'}]
    with pytest.raises(AnsibleFilterError, match="mig_layout_advice: unknown timezone 'Europe/Berln'") as error:
        mig_layout_advice(request(), hosts(), shipped, switches, timezone='Europe/Berln')
    assert '\n' not in str(error.value)
    advice = mig_layout_advice(request(), hosts(), shipped, switches, timezone='Europe/Berlin')
    assert advice['models'][0]['requested'] == 1.0

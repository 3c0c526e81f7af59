# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout advisor's input (planning/_advice_demand): recorded requests and Prometheus samples read, bad input
refused in one line, and every request read counted in exactly one class (tally)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.mig.plugins.module_utils.planning import _advice_demand as demand_input
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_demand import AdvisorError

SEVEN = 'nvidia.com/mig-7g.80gb'
ONE = 'nvidia.com/mig-1g.10gb'
OFFERED = (ONE, SEVEN, 'nvidia.com/gpu')


# ---- reading ---------------------------------------------------------------------------------------------------------

def test_recorded_requests_are_averaged_over_each_hour():
    wanted = demand_input.demand_from_requests([{'arrival': 1800, 'hold': 3600, 'resource': ONE},
                                                {'arrival': 86400 + 7200, 'hold': 1800, 'resource': SEVEN, 'devices': 2}], 2)
    assert wanted.hourly[ONE][0][:3] == (0.5, 0.5, 0.0)
    assert wanted.hourly[SEVEN][1][2] == 1.0
    # placed requests, not device-hours: one request per device-hour of 1g, one per device-hour of 7g here
    assert wanted.weights == {ONE: 1.0, SEVEN: 1.0}
    longer = demand_input.demand_from_requests([{'arrival': 0, 'hold': 4 * 3600, 'resource': SEVEN}], 1)
    assert longer.weights == {SEVEN: 0.25}


def test_a_request_after_the_window_is_counted_outside_it():
    wanted = demand_input.demand_from_requests([{'arrival': 0, 'hold': 3600, 'resource': ONE},
                                                {'arrival': 86400 + 5, 'hold': 3600, 'resource': ONE}], 1)
    assert wanted.weights == {ONE: 1.0}
    assert (wanted.requests, wanted.outside, wanted.read()) == ({ONE: 1}, 1, 2)


def test_prometheus_series_are_matched_back_from_sanitised_labels():
    # each value stamped at the end of its hour: 26 h is day 1, hour 1; 4 h is day 0, hour 3; 0 h is before the window
    series = [{'metric': {'resource': 'nvidia_com_mig_1g_10gb'}, 'values': [[3600 * 26, '2'], [3600 * 4, '1.5'], [0, '9']]},
              {'metric': {'resource': 'nvidia_com_gpu'}, 'values': [[3600, '1']]},
              {'metric': {'resource': 'nvidia_com_mig_9g_99gb'}, 'values': [[3600, '5']]}]
    wanted = demand_input.demand_from_samples(series, [ONE, 'nvidia.com/gpu'], 0)
    assert wanted.days == 2
    assert wanted.hourly[ONE][1][1] == 2.0 and wanted.hourly[ONE][0][3] == 1.5
    assert wanted.hourly['nvidia.com/gpu'][0][0] == 1.0
    # a label no resource of the fleet sanitises to is kept under the label, to be named
    assert wanted.hourly['nvidia_com_mig_9g_99gb'][0][0] == 5.0
    assert wanted.weights == {}
    counted = demand_input.demand_from_samples(series, [ONE, 'nvidia.com/gpu'], 0,
                                               [{'metric': {'resource': 'nvidia_com_mig_1g_10gb'}, 'value': [0, '7']}])
    assert counted.weights == {ONE: 2.0}    # 7 requests over 3.5 device-hours


def test_sanitised_as_kube_state_metrics_writes_it():
    assert demand_input.sanitized('nvidia.com/mig-1g.10gb+me') == 'nvidia_com_mig_1g_10gb_me'


def test_recorded_demand_document():
    wanted = demand_input.demand_from_document({'days': 1, 'requests': [{'arrival': 0, 'hold': 7200, 'resource': ONE}]})
    assert wanted.hourly[ONE][0][:3] == (1.0, 1.0, 0.0)


# ---- bad input: one line, nothing read ----------------------------------------------------------------------------------

def one(**fields):
    request = {'arrival': 0, 'hold': 3600, 'resource': ONE}
    request.update(fields)
    return {'days': 1, 'requests': [request]}


@pytest.mark.parametrize('document, message', [
    ([], 'recorded demand file holds'),
    ([{'arrival': 0}], 'recorded demand file holds'),
    ({'requests': []}, 'recorded demand file holds|days'),
    ({'days': 1, 'requests': []}, 'lists no request'),
    ({'days': 0, 'requests': [{'arrival': 0, 'hold': 1, 'resource': ONE}]}, 'no whole day'),
    ({'days': True, 'requests': [{'arrival': 0, 'hold': 1, 'resource': ONE}]}, 'days'),
    ({'days': 1, 'requests': [7]}, 'recorded request 0 must be'),
    ({'days': 1, 'requests': [{'arrival': 0, 'resource': ONE}]}, 'recorded request 0 lacks hold'),
    (one(arrival=float('nan')), 'arrival of recorded request 0 must be a finite number'),
    (one(arrival='nan'), 'arrival of recorded request 0 must be a finite number'),
    (one(hold=float('inf')), 'hold of recorded request 0 must be a finite number'),
    (one(arrival='x'), 'arrival of recorded request 0 must be a number'),
    (one(arrival=True), 'arrival of recorded request 0 must be a number'),
    (one(hold=-1), 'negative'),
    (one(devices=-50), 'whole number of devices'),
    (one(devices=0), 'whole number of devices'),
    (one(devices=1.5), 'whole number of devices'),
    (one(devices=float('nan')), 'devices of recorded request 0 must be a finite number'),
    (one(devices='inf'), 'devices of recorded request 0 must be a finite number'),
    (one(resource=None), 'must name its resource'),
    (one(resource=''), 'must name its resource'),
])
def test_bad_recorded_demand_is_refused_in_one_line(document, message):
    with pytest.raises(AdvisorError, match=message) as error:
        demand_input.demand_from_document(document)
    assert '\n' not in str(error.value)


def series(*values, **metric):
    return [{'metric': metric or {'resource': 'nvidia_com_mig_1g_10gb'}, 'values': [[3600, v] for v in values]}]


@pytest.mark.parametrize('samples, counts, message', [
    ([], None, 'no demand series'),
    ([7], None, 'query_range series is'),
    ([{'metric': {'resource': 'nvidia_com_gpu'}}], None, 'query_range series is'),
    (series('NaN'), None, 'finite number'),
    (series('+Inf'), None, 'finite number'),
    (series('-2'), None, 'negative'),
    (series('x'), None, 'must be a number'),
    ([{'metric': {'resource': 'nvidia_com_gpu'}, 'values': [[3600]]}], None, r'not \[time, value\]'),
    (series('1', job='x'), None, 'no resource label'),
    (series('1'), [{'metric': {'resource': 'nvidia_com_mig_1g_10gb'}, 'value': [0, 'NaN']}], 'request count .* finite'),
    (series('1'), [{'metric': {'resource': 'nvidia_com_mig_1g_10gb'}, 'value': [0, '-1']}], 'negative'),
    (series('1'), [{'metric': {'resource': 'nvidia_com_mig_1g_10gb'}}], 'request count is'),
    (series('1'), {'x': 1}, 'request count must be'),
])
def test_bad_prometheus_answers_are_refused_in_one_line(samples, counts, message):
    with pytest.raises(AdvisorError, match=message) as error:
        demand_input.demand_from_samples(samples, [ONE], 0, counts)
    assert '\n' not in str(error.value)


# ---- every request accounted for ----------------------------------------------------------------------------------

NAMES = (ONE, SEVEN, 'nvidia.com/gpu', 'nvidia.com/mig-1g.12gb', 'nvidia.com/mig-9g.99gb', 'nvidia_com_mig_1g_10gb',
         'example.com/fpga', 'nvidia.com/mig-1g.5gb.shared')
CLASS_OF = {ONE: 'hostable', SEVEN: 'hostable', 'nvidia.com/gpu': 'whole_gpu', 'nvidia.com/mig-1g.12gb': 'unhostable',
            'nvidia.com/mig-9g.99gb': 'unhostable', 'nvidia.com/mig-1g.5gb.shared': 'unhostable',
            'nvidia_com_mig_1g_10gb': 'unhostable', 'example.com/fpga': 'unknown'}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(NAMES), st.floats(0, 2 * 86400), st.floats(0, 10 * 3600)), min_size=1, max_size=40))
def test_every_request_read_is_counted_in_exactly_one_class(drawn):
    """Whatever the names and times: read = hostable + whole-GPU + unhostable + unknown + outside, each class holds
    exactly the requests of its names, and the first line of the tally says so."""
    requests = [{'arrival': arrival, 'hold': hold, 'resource': name} for name, arrival, hold in drawn]
    counted = demand_input.tally(demand_input.demand_from_requests(requests, 1), set(OFFERED))
    inside = [name for name, arrival, dummy in drawn if arrival < 86400]
    assert counted.read == len(drawn)
    assert counted.outside == len(drawn) - len(inside)
    assert (sum(counted.hostable.values()) + counted.whole_gpu + sum(counted.unhostable.values()) + sum(counted.unknown.values())
            + counted.outside) == counted.read
    for klass in ('hostable', 'unhostable', 'unknown'):
        expected = dict((n, inside.count(n)) for n in set(inside) if CLASS_OF[n] == klass)
        assert getattr(counted, klass) == expected
    assert counted.whole_gpu == inside.count('nvidia.com/gpu')
    assert counted.served() == sum(counted.hostable.values()) + counted.whole_gpu
    assert counted.lines()[0].startswith('requests read: %d = ' % len(drawn))


def test_the_tally_names_what_the_fleet_cannot_place():
    requests = [{'arrival': 0, 'hold': 60, 'resource': name} for name in (ONE, 'nvidia.com/gpu', 'nvidia.com/mig-1g.12gb',
                                                                          'nvidia.com/mig-1g.12gb', 'example.com/fpga')]
    requests.append({'arrival': 86400, 'hold': 60, 'resource': ONE})
    lines = demand_input.tally(demand_input.demand_from_requests(requests, 1), set(OFFERED)).lines()
    assert lines[0] == ('requests read: 6 = 1 a MIG profile of the fleet serves + 1 whole-GPU + 2 unhostable + 1 unknown name '
                        '+ 1 outside the window')
    assert 'whole-GPU pods (nvidia.com/gpu): 1, served only by a GPU whose MIG is off' in lines
    assert 'unhostable, no GPU of the fleet offers the profile: nvidia.com/mig-1g.12gb 2' in lines
    assert 'unknown names, no GPU resource: example.com/fpga 1' in lines
    assert 'outside the window (arrived after its end): 1' in lines


def test_prometheus_counts_are_the_tally_s_and_device_hours_where_none_was_read():
    samples = [{'metric': {'resource': 'nvidia_com_mig_1g_10gb'}, 'values': [[3600 * h, '1'] for h in range(1, 25)]},
               {'metric': {'resource': 'nvidia_com_mig_1g_12gb'}, 'values': [[3600, '0.5']]}]
    counted = demand_input.tally(demand_input.demand_from_samples(
        samples, list(OFFERED), 0, [{'metric': {'resource': 'nvidia_com_mig_1g_10gb'}, 'value': [0, '30']}]), set(OFFERED))
    assert counted.hostable == {ONE: 30}
    assert counted.unhostable == {'nvidia_com_mig_1g_12gb': 1}
    assert counted.read == 31

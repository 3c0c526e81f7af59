# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter of playbooks/mig_advise.yml: the layouts and daily switches a fleet's recorded demand asks for. Thin: the
rule is module_utils/planning/_layout_advisor, where unit tests reach it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_demand import (
    AdvisorError,
    demand_from_document,
    demand_from_samples,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_replay import DEFAULT_PATIENCE_MINUTES
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_advisor import (
    DEFAULT_FORKS,
    DEFAULT_MAX_SWITCHES,
    DEFAULT_MIN_GAIN,
    advise,
    fleets_from_facts,
    schedule_from_switches,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import LayoutConfigError, validate_configs


def mig_layout_advice(demand, hosts, configs, current, start=0, max_switches=DEFAULT_MAX_SWITCHES, switch_seconds=0, requests=None,
                      serial=1, forks=DEFAULT_FORKS, min_gain=DEFAULT_MIN_GAIN, patience_minutes=DEFAULT_PATIENCE_MINUTES,
                      timezone='UTC'):
    """The advice (planning/_advice_output.Advice.as_dict) for ``demand``: a Prometheus query_range matrix of
    hourly averages (``data.result``) or a recorded demand file ({days, requests}); ``requests``: Prometheus' count
    of requests per resource over the window (``data.result`` of an instant query), whence placed requests;
    ``serial``, ``forks``, ``switch_seconds`` (a host's): the rollout a switch costs; ``min_gain``: the share more
    than the best single layout a schedule must place in the replay; ``patience_minutes``: the requests';
    ``timezone``: the current schedule's (awx_schedule_timezone), where a switch names none."""
    try:
        fleets, left_out = fleets_from_facts(hosts)
        resources = sorted(set(r for fleet in fleets for r in fleet.resources()))
        if isinstance(demand, dict):
            recorded = demand_from_document(demand)
        elif isinstance(demand, list) and all(isinstance(item, dict) and 'values' in item for item in demand):
            recorded = demand_from_samples(demand, resources, float(start), requests)
        else:
            raise AdvisorError('the demand must be a Prometheus query_range result (data.result: [{metric, values}]) or a '
                               'recorded demand file ({days, requests}), got %s' % _shape(demand))
        current_configs = validate_configs(configs)
        advice = advise(recorded, fleets, current_configs, schedule_from_switches(current, timezone, start), max_switches, switch_seconds,
                        serial, forks, min_gain, patience_minutes)
    except (AdvisorError, LayoutConfigError) as exc:
        raise AnsibleFilterError('mig_layout_advice: %s' % exc)
    result = advice.as_dict()
    # the file to commit: the current catalog with the advised layouts beside it (a former advice's replaced), so
    # that mig_layout_config_file can name it and every layout the hosts may be on stays defined
    merged = dict(current_configs)
    merged.update(result['catalog']['mig-configs'])
    result['catalog'] = {'version': 'v1', 'mig-configs': merged}
    result['left_out'] = left_out
    result['days'] = recorded.days
    return result


def _shape(demand):
    if isinstance(demand, list):
        return 'a list of %s' % type(demand[0]).__name__
    return type(demand).__name__


class FilterModule(object):
    """gpufleet.mig layout advisor filter."""

    def filters(self):
        return {'mig_layout_advice': mig_layout_advice}

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_demand_plan: the planner's plan as a filter; bad input is one AnsibleFilterError line."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter.mig_demand import FilterModule
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu

FILTERS = FilterModule().filters()


def facts():
    gpu = model_gpu('H100-SXM5-80GB').as_dict()
    gpu['allocated_to'] = []
    return {'driver_version': '580.95.05', 'gpus': [gpu]}


def test_registered():
    assert sorted(FILTERS) == ['mig_demand_events', 'mig_demand_node_patch', 'mig_demand_plan']


def test_the_node_patch_filter_refuses_a_bad_outcome_in_one_line():
    patch = FILTERS['mig_demand_node_patch'](None, 'h1', 'fast-a-1', 'created', 'ok')
    assert list(patch['metadata']['annotations']) == ['gpufleet.mig/demand-create']
    with pytest.raises(AnsibleFilterError, match='must be created, refused or failed'):
        FILTERS['mig_demand_node_patch'](None, 'h1', 'fast-a-1', 'maybe')


def test_unmet_demand_of_a_plan_becomes_events_on_the_listed_pods():
    pod = {'kind': 'Pod', 'apiVersion': 'v1', 'metadata': {'namespace': 'ml', 'name': 'huge', 'uid': 'u1'},
           'spec': {'containers': [{'name': 'c', 'resources': {'limits': {'nvidia.com/mig-1g.5gb': 1}}}]},
           'status': {'phase': 'Pending', 'conditions': [{'type': 'PodScheduled', 'status': 'False', 'reason': 'Unschedulable',
                                                          'message': '0/1 nodes are available: 1 Insufficient nvidia.com/mig-1g.5gb.'}]}}
    plan = FILTERS['mig_demand_plan']({'n1': facts()}, [pod])
    events = FILTERS['mig_demand_events'](plan['unmet_reasons'], [pod], [], '2026-12-04T03:00:00.000000Z')
    assert [e['regarding']['uid'] for e in events['create']] == ['u1'] and events['count'] == []
    assert events['create'][0]['note'].endswith('1g.5gb: 1 device(s) for ml/huge unmet: no GPU of the fleet offers this profile')


def test_plans_from_facts_and_pod_objects():
    pod = {'metadata': {'namespace': 'ml', 'name': 'infer'},
           'spec': {'containers': [{'resources': {'limits': {'nvidia.com/mig-1g.10gb': 1}}}]}}
    plan = FILTERS['mig_demand_plan']({'node-a': facts()}, [pod])
    assert plan['served'] == [{'pod': 'ml/infer', 'node': 'node-a', 'devices': [{'gpu': 0, 'profile': '1g.10gb', 'start': 0, 'instance': 'new'}]}]
    assert plan['nodes']['node-a']['disruption'] == 'create-only'
    assert plan['lines'][-1] == '1 of 1 waiting pod(s) served, 1 GPU(s) changed, 0 pod(s) to evict'
    # policy defaults to {} (None from a template too)
    assert FILTERS['mig_demand_plan']({'node-a': facts()}, [pod], None) == plan


def test_bad_input_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match='^policy: unknown key'):
        FILTERS['mig_demand_plan']({}, [], {'nodes': []})


def test_the_cluster_argument_keeps_a_pod_off_nodes_it_may_not_run_on():
    pod = {'metadata': {'namespace': 'ml', 'name': 'pinned'},
           'spec': {'nodeSelector': {'pool': 'b'}, 'containers': [{'resources': {'limits': {'nvidia.com/mig-1g.10gb': 1}}}]}}
    cluster = {'nodes': {'node-a': {'metadata': {'name': 'node-a', 'labels': {'pool': 'a'}}},
                         'node-b': {'metadata': {'name': 'node-b', 'labels': {'pool': 'b'}}}}, 'pods': []}
    plan = FILTERS['mig_demand_plan']({'node-a': facts(), 'node-b': facts()}, [pod], {}, cluster)
    assert [s['node'] for s in plan['served']] == ['node-b']
    assert FILTERS['mig_demand_plan']({'node-a': facts()}, [pod], {}, cluster)['unmet_pods'] == ['ml/pinned']
    with pytest.raises(AnsibleFilterError, match="^cluster must be"):
        FILTERS['mig_demand_plan']({'node-a': facts()}, [pod], {}, [])

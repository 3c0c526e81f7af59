# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter of playbooks/mig_demand.yml: the fleet demand plan (pending pods' MIG requests -> per node and GPU
the instances to create and destroy). Thin: the rules are in module_utils/planning/_demand_planner, where unit tests reach
them; bad input becomes one AnsibleFilterError line.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import node_patch
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_planner import plan_demand
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._node_events import unmet_demand_events


def mig_demand_plan(nodes, pending, policy=None, cluster=None):
    """The fleet demand plan of ``pending`` pods on ``nodes`` (node -> nvidia_mig facts) under ``policy``; with
    ``cluster`` ({nodes: node -> Node object, pods: Pod objects}) only where each pod may run."""
    try:
        return plan_demand(nodes, pending, policy or {}, cluster)
    except DemandPlanError as exc:
        raise AnsibleFilterError(str(exc))


def mig_demand_events(unmet_reasons, pods, existing, stamp):
    """The Events to create, and those of earlier runs to count again, that tell each waiting pod why its demand is unmet."""
    return unmet_demand_events(unmet_reasons, pods, existing, stamp)


def mig_demand_node_patch(facts, host, run=None, result=None, reason=None):
    """The Node patch of the demand fast path: the host's GPU annotation (``facts``: nvidia_mig facts, or None) and the
    outcome of fast run ``run``."""
    try:
        return node_patch(host, facts, run, result, reason)
    except DemandPlanError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    """gpufleet.mig demand filters."""

    def filters(self):
        return {'mig_demand_plan': mig_demand_plan, 'mig_demand_events': mig_demand_events,
                'mig_demand_node_patch': mig_demand_node_patch}

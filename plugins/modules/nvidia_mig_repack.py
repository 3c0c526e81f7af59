#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: nvidia_mig_repack
short_description: Repack fragmented NVIDIA MIG GPUs by moving only idle, unallocated instances
version_added: 0.2.0
description:
  - For each selected MIG GPU whose fragmentation or stranded slices exceed the thresholds, keeps the same instances
    but moves idle ones (no process, held by no pod) to the placements that leave the largest profile placeable and
    the fewest slices stranded. Busy and allocated instances never move.
  - Every GPU instance keeps its profile and its compute instances; a moved one is recreated with the same compute
    instance profiles. Compute instances are never regrouped into fewer GPU instances.
  - A GPU where no move helps without touching a busy or allocated instance is reported with the reason and left as it
    is, never forced.
  - Everything is planned before the first change; after the moves each GPU is read back and must match the plan.
    The figures before and after are returned; check mode shows the moves.
extends_documentation_fragment:
  - gpufleet.mig.nvml
  - gpufleet.mig.nvml.gpus
  - gpufleet.mig.nvml.pod_resources
options:
  gpus:
    default: [all]
  fragmentation_above:
    description:
      - Repack a GPU whose fragmentation (C(1 - largest placeable slices / largest placeable slices after the best
        rearrangement of the same instances)) is above this.
      - The default is the P(gpufleet.mig.mig_layout#role) role's C(mig_layout_repack_fragmentation_above) and the fleet
        map's, so that the module and playbooks/mig_repack.yml repack the same GPUs.
    type: float
    default: 0.25
  stranded_above:
    description:
      - Repack a GPU with more stranded memory slices than this (free slices unusable as placed that the best
        rearrangement of the same instances would make usable).
    type: int
    default: 0
attributes:
  check_mode:
    support: full
    description: Plans and reports the moves; calls no mutating NVML function.
  diff_mode:
    support: full
    description: Shows each repacked GPU's instances before and after.
author:
  - gpufleet.mig developers (@gpufleet)
seealso:
  - module: gpufleet.mig.nvidia_mig_facts
  - module: gpufleet.mig.nvidia_mig_instance
'''

EXAMPLES = r'''
- name: Show which GPUs a repack would change, and how
  gpufleet.mig.nvidia_mig_repack:
    fragmentation_above: 0.25
  check_mode: true

- name: Repack every GPU that strands memory
  gpufleet.mig.nvidia_mig_repack:
    stranded_above: 0
'''

RETURN = r'''
gpus:
  description: One entry per selected MIG-enabled GPU.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: NVML index.
      type: int
    uuid:
      description: GPU UUID.
      type: str
    status:
      description:
        - V(repacked) (would be, in check mode), V(below_threshold), V(no_idle_move) (nothing can move without
          touching a busy or allocated instance, no move improves the free space, or pods hold the GPU's MIG devices
          by index id, which any move would make name other instances), or V(mig_disabled).
      type: str
    reason:
      description: Why the GPU was left as it is.
      type: str
    before:
      description: Free-space figures before (free, stranded, largest placeable, fragmentation).
      type: dict
    after:
      description: Free-space figures after the moves (planned, in check mode).
      type: dict
    actions:
      description: The moves as destroy and create actions, in order.
      type: list
      elements: dict
    before_layout:
      description: GPU instances before the moves, sorted by placement (null unless repacked).
      type: list
      elements: dict
    after_layout:
      description: GPU instances after the moves (null unless repacked).
      type: list
      elements: dict
actions:
  description: Every action done (planned, in check mode), each with its C(gpu).
  returned: always
  type: list
  elements: dict
skipped_gpus:
  description: GPUs matched through V(all) that are not MIG-capable, with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{index: 3, name: NVIDIA L40S, reason: not MIG-capable}]
resources:
  description: The extended resources NVIDIA's device plugin (mixed strategy) advertises for the GPUs as they end.
  returned: always
  type: dict
expected_device_ids:
  description:
    - The device ids NVIDIA's device plugin should advertise for the GPUs as they end, as
      RV(gpufleet.mig.nvidia_mig_layout#module:expected_device_ids) gives them. A moved instance is created anew
      and gets a new UUID, so the count of each resource stays while its ids change; the role compares these ids
      with the kubelet's before the node goes back into service.
    - In check mode, the ids as they are (a moved instance's new UUID exists only once it is created).
  returned: always
  type: dict
  sample: {nvidia.com/mig-1g.10gb: {uuid: [MIG-2f1e0c3a-0000-4000-8000-000000000001], index: ['0:0']}}
pod_resources:
  description: C(read) (whether the kubelet's pod-resources API answered) and C(reason) when it did not.
  returned: always
  type: dict
  sample: {read: true}
'''

from ansible.module_utils.basic import AnsibleModule

# First of the collection's imports: from the module's payload, the others are then compiled once each (_payload_import).
from ansible_collections.gpufleet.mig.plugins.module_utils import _payload_import  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpufleet.mig.plugins.module_utils._diff_recorder import DiffRecorder
from ansible_collections.gpufleet.mig.plugins.module_utils.host._gpu_selection import select_mig_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils.host._plan_executor import apply_plan
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError, current_specs, plan_gpu_specs
from ansible_collections.gpufleet.mig.plugins.module_utils._module_support import (
    COMMON_ARGUMENT_SPEC,
    POD_RESOURCES_ARGUMENT_SPEC,
    nvml_session,
    read_pod_resources,
    run_module,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_allocations import (
    expected_device_ids,
    host_allocations,
    index_id_refusal,
    node_resources,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import free_space

_FIGURES = ('free_slices', 'stranded_slices', 'largest_placeable', 'largest_placeable_slices', 'fragmentation')


def figures(analysis):
    return dict((key, analysis[key]) for key in _FIGURES)


def plan_repack(gpu, holders, params):
    """(status, reason, plan or None) for one GPU: pure, from its current state. ``holders``: the pods that hold
    it (_host_model.GpuHolders); those holding its MIG devices by index id would name other instances after any move."""
    if not gpu.mig_mode.enabled:
        return 'mig_disabled', 'MIG is disabled', None
    before = free_space(gpu)
    if before['fragmentation'] <= params['fragmentation_above'] and before['stranded_slices'] <= params['stranded_above']:
        return 'below_threshold', 'fragmentation %.2f and %d stranded slice(s) are within the thresholds' % (
            before['fragmentation'], before['stranded_slices']), None
    refusal = index_id_refusal(gpu.index, list(holders.index_pods), 'moving its instances')
    if refusal:
        return 'no_idle_move', refusal, None
    empty = [gi.id for gi in gpu.gpu_instances if not gi.compute_instances]
    if empty:
        return 'no_idle_move', 'GPU instance(s) %s have no compute instance, which no layout describes' % empty, None
    try:
        # Each GPU instance as it is: a count layout would regroup compute instances into fewer GPU instances.
        plan = plan_gpu_specs(gpu, current_specs(gpu), repack=True, holders=holders)
    except PlanningError as exc:
        return 'no_idle_move', str(exc), None
    better = (plan.analysis['largest_placeable_slices'], -plan.analysis['stranded_slices']) > (
        before['largest_placeable_slices'], -before['stranded_slices'])
    if not plan.changed or not better:
        staying = [gi.id for gi in gpu.gpu_instances if gi.busy or holders.of_instance(gi.id)]
        return 'no_idle_move', ('no move of an idle, unallocated instance improves the free space (busy or allocated '
                                'instances %s stay where they are)' % staying), None
    return 'repacked', None, plan


def main_body(module):
    params = module.params
    if params['fragmentation_above'] < 0 or params['stranded_above'] < 0:
        module.fail_json(msg='fragmentation_above and stranded_above must be 0 or more')
    results = []
    done = []
    with nvml_session(module, exclusive=not module.check_mode) as backend:
        # Under the host lock, as the GPUs are read: one snapshot of what pods and GPUs hold.
        pod_devices, pod_status = read_pod_resources(module)
        host = backend.read_host()
        holders = host_allocations(host, pod_devices)
        planned = []
        selected, skipped = select_mig_gpus(host.gpus, params['gpus'])
        for gpu in selected:
            status, reason, plan = plan_repack(gpu, holders.of(gpu.uuid), params)
            planned.append((gpu, status, reason, plan))
        for gpu, status, reason, plan in planned:
            actions = plan.actions if plan else []
            if plan and not module.check_mode:
                actions, dummy = apply_plan(backend, gpu, plan)
            done.extend(dict(action, gpu=gpu.index) for action in actions)
            results.append({
                'index': gpu.index,
                'uuid': gpu.uuid,
                'status': status,
                'reason': reason,
                'before': figures(free_space(gpu)) if gpu.profiles else None,
                'after': figures(plan.analysis) if plan else None,
                'actions': actions,
                'before_layout': plan.before if plan else None,
                'after_layout': plan.after if plan else None,
            })
        final = backend.read_host(with_profiles=False) if done else host
    output = dict(changed=bool(done), gpus=results, actions=done, resources=node_resources(final),
                  expected_device_ids=expected_device_ids(final), skipped_gpus=skipped, pod_resources=pod_status)
    if module._diff:
        diff = DiffRecorder()
        for r in results:
            if r['status'] == 'repacked':
                diff.layout(r['index'], r['before_layout'], r['after_layout'])
        output['diff'] = diff.as_dict()
    module.exit_json(**output)


def main():
    argument_spec = dict(
        gpus=dict(type='list', elements='str', default=['all']),
        fragmentation_above=dict(type='float', default=0.25),
        stranded_above=dict(type='int', default=0),
    )
    argument_spec.update(COMMON_ARGUMENT_SPEC)
    argument_spec.update(POD_RESOURCES_ARGUMENT_SPEC)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    run_module(module, main_body)


if __name__ == '__main__':
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: nvidia_mig_instance
short_description: Enforce NVIDIA MIG GPU and compute instances with explicit placement planning
version_added: 0.1.0
description:
  - Makes each selected GPU hold exactly the declared MIG instances, planning every placement explicitly so the
    result never depends on the order of keys or on the driver's placement choice.
  - Current instances that match are kept, busy ones first; only as many idle instances are destroyed as the
    change needs. Busy instances (running processes, or held by a Kubernetes pod, see O(pod_resources)) are never
    destroyed; if the layout cannot be reached around them the module fails, naming the GPU, instance, profile and
    the processes or pods, and changes nothing.
  - Everything is validated on every selected GPU before the first change. After applying, the GPU is read
    back and must match the plan.
  - Whether a GPU is already in layout is decided on profiles and compute instances, not on placement, unless
    O(repack) is set.
extends_documentation_fragment:
  - gpufleet.mig.nvml
  - gpufleet.mig.nvml.gpus
  - gpufleet.mig.nvml.pod_resources
options:
  gpus:
    required: true
  instances:
    description:
      - Mapping of MIG profile to count, with mig-parted C(mig-devices) semantics.
      - A GPU instance profile such as V(3g.40gb) asks for that many GPU instances, each with one full-size
        compute instance (what the device plugin hands out as C(nvidia.com/mig-3g.40gb)).
      - A compute instance profile such as V(1c.3g.40gb) is packed, largest first and first fit, into as few GPU
        instances of that profile as it fits in; V(1c.3g.40gb) V(4) on an A100-80GB makes two 3g.40gb GPU
        instances, one with three 1c compute instances and one with one.
      - Profile names follow the grammar C([<C>c.]<G>g.<GB>gb[+me]) and must be offered by the GPU as NVML reports
        it. A count of V(0) is the same as leaving the key out.
    type: dict
    default: {}
  state:
    description:
      - V(present) makes the GPUs end with exactly O(instances).
      - V(absent) destroys every instance on the selected GPUs (O(instances) must be empty).
    type: str
    choices: [present, absent]
    default: present
  repack:
    description:
      - Also move idle instances to compact free space, maximising the largest profile that still fits,
        without touching busy ones. Placement then counts for idempotence.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Returns the same plan and calls no mutating NVML function.
  diff_mode:
    support: full
    description: Shows each GPU's layout before and after, one line per GPU instance.
author:
  - gpufleet.mig developers (@gpufleet)
seealso:
  - module: gpufleet.mig.nvidia_mig_mode
  - module: gpufleet.mig.nvidia_mig_facts
'''

EXAMPLES = r'''
- name: Inference layout on every A100-80GB (seven small instances)
  gpufleet.mig.nvidia_mig_instance:
    gpus: ["0x20B210DE"]
    instances:
      1g.10gb: 7

- name: Mixed layout; a busy 3g.40gb is kept where it is
  gpufleet.mig.nvidia_mig_instance:
    gpus: [0]
    instances:
      2g.20gb: 2
      3g.40gb: 1

- name: Four small compute instances sharing two 3g GPU instances
  gpufleet.mig.nvidia_mig_instance:
    gpus: [1]
    instances:
      1c.3g.40gb: 4

- name: Remove every instance from GPU 2
  gpufleet.mig.nvidia_mig_instance:
    gpus: [2]
    state: absent
'''

RETURN = r'''
gpus:
  description: One entry per selected GPU that was planned.
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
    changed:
      description: Whether this GPU changed (would change, in check mode).
      type: bool
    before:
      description: GPU instances before, sorted by placement, each with profile, placement, compute instances and busy.
      type: list
      elements: dict
    after:
      description: GPU instances after (planned, in check mode), in the same form.
      type: list
      elements: dict
    actions:
      description: The ordered actions for this GPU, each with action, profile, placement and ids.
      type: list
      elements: dict
    free_space_after:
      description: Free slices, placeable counts, largest placeable profile, stranded slices and fragmentation after the change.
      type: dict
    deferred:
      description:
        - True when MIG is only pending-enabled (check mode). NVML describes the GPU's profiles once MIG is enabled,
          so its instances are planned then (RV(gpus[].note)) and RV(gpus[].after) is null.
      type: bool
    note:
      description: Why the GPU was not planned yet, or null.
      type: str
actions:
  description: Every action in order, across GPUs, each with its C(gpu) index.
  returned: always
  type: list
  elements: dict
  sample:
    - {gpu: 0, action: create_gpu_instance, profile: 2g.20gb, profile_id: 14, placement: {start: 0, size: 2}, gpu_instance_id: 3}
    - {gpu: 0, action: create_compute_instance, profile: 2g.20gb, profile_id: 1, placement: {start: 0, size: 2},
       gpu_instance_id: 3, compute_instance_id: 0}
skipped_gpus:
  description: GPUs matched through V(all) that are not MIG-capable.
  returned: always
  type: list
  elements: dict
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
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import ENABLED, HostHolders
from ansible_collections.gpufleet.mig.plugins.module_utils.host._gpu_selection import select_mig_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils.host._plan_executor import ApplyError, apply_plan
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import DEFERRED_NOTE, PlanningError, plan_gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_allocations import host_allocations, index_id_refusal
from ansible_collections.gpufleet.mig.plugins.module_utils._module_support import (
    COMMON_ARGUMENT_SPEC,
    POD_RESOURCES_ARGUMENT_SPEC,
    nvml_session,
    read_pod_resources,
    run_module,
)


def wanted_instances(params):
    instances = params['instances'] or {}
    if params['state'] == 'absent':
        if any(instances.values()):
            raise PlanningError('state=absent removes every instance; leave instances empty (got %s)' % sorted(instances))
        return {}
    wanted = {}
    for key, count in instances.items():
        if isinstance(count, str) and count.strip().isdigit():
            count = int(count)
        wanted[str(key)] = count
    return wanted


def plan_selected(host, params, check_mode, holders=None):
    """Plan every selected GPU before anything changes. A GPU whose MIG is only pending-enabled (check mode)
    cannot be planned: NVML describes its profiles once MIG is on; it is reported as deferred.
    ``holders``: _pod_allocations.allocations_of of the host (_host_model.HostHolders); instances pods hold are busy."""
    wanted = wanted_instances(params)
    holders = holders or HostHolders()
    plans = []
    selected, skipped = select_mig_gpus(host.gpus, params['gpus'])
    for gpu in selected:
        mode = gpu.mig_mode
        if not mode.enabled:
            if not (check_mode and mode.pending == ENABLED):
                raise PlanningError('GPU %d (%s): MIG mode is %s (pending %s); enable it first with gpufleet.mig.nvidia_mig_mode'
                                    % (gpu.index, gpu.uuid, mode.current, mode.pending))
            plans.append((gpu, None))
            continue
        gpu_holders = holders.of(gpu.uuid)
        plan = plan_gpu(gpu, wanted, repack=params['repack'], holders=gpu_holders)
        refusal = index_id_refusal(gpu.index, list(gpu_holders.index_pods) if plan.changed else [], 'changing its instances')
        if refusal:
            raise PlanningError(refusal)
        plans.append((gpu, plan))
    return plans, skipped


def main_body(module):
    results = []
    all_actions = []
    with nvml_session(module) as backend:
        # Under the host lock, as the GPUs are read: one snapshot of what pods and GPUs hold.
        pod_devices, pod_status = read_pod_resources(module)
        host = backend.read_host()
        plans, skipped = plan_selected(host, module.params, module.check_mode, host_allocations(host, pod_devices))
        for gpu, plan in plans:
            if plan is None:
                results.append({'index': gpu.index, 'uuid': gpu.uuid, 'changed': bool(wanted_instances(module.params)),
                                'before': [], 'after': None, 'actions': [], 'free_space_after': None, 'deferred': True,
                                'note': DEFERRED_NOTE})
                continue
            actions = plan.actions
            after = plan.after
            if plan.changed and not module.check_mode:
                try:
                    actions, after = apply_plan(backend, gpu, plan)
                except ApplyError as exc:
                    module.fail_json(msg=str(exc), gpu=gpu.index, done=exc.done, layout_now=exc.layout_now,
                                     gpus=results, actions=all_actions, pod_resources=pod_status)
            results.append({
                'index': gpu.index,
                'uuid': gpu.uuid,
                'changed': plan.changed,
                'before': plan.before,
                'after': after,
                'actions': actions,
                'free_space_after': plan.analysis,
                'deferred': False,
                'note': None,
            })
            all_actions.extend(dict(action, gpu=gpu.index) for action in actions)

    output = dict(changed=any(r['changed'] for r in results), gpus=results, actions=all_actions, skipped_gpus=skipped,
                  pod_resources=pod_status)
    if module._diff:
        diff = DiffRecorder()
        for r in results:
            diff.layout(r['index'], r['before'], r['after'], note=r['note'])
        output['diff'] = diff.as_dict()
    module.exit_json(**output)


def main():
    argument_spec = dict(
        gpus=dict(type='list', elements='str', required=True),
        instances=dict(type='dict', default={}),
        state=dict(type='str', default='present', choices=['present', 'absent']),
        repack=dict(type='bool', default=False),
    )
    argument_spec.update(COMMON_ARGUMENT_SPEC)
    argument_spec.update(POD_RESOURCES_ARGUMENT_SPEC)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    run_module(module, main_body)


if __name__ == '__main__':
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: nvidia_mig_mode
short_description: Enable or disable NVIDIA MIG mode idempotently through NVML
version_added: 0.1.0
description:
  - Sets MIG mode on the selected GPUs and, when asked and the GPU is idle, resets the GPU so that a pending
    mode takes effect.
  - On an idle GPU a mode change applies at once (on Ampere the driver resets the GPU itself). When another
    client holds the GPU (nvidia-persistenced, DCGM, the nvidia_drm module) NVML leaves the change pending and
    says why; RV(gpus[].pending_reason) reports it, and O(allow_reset=true) then resets the GPU.
  - On Ampere (A100, A30) the mode persists across reboots; on Hopper and later (H100, H200, GH200, B200, ...) it
    does not (the boot unit of the P(gpufleet.mig.mig_layout#role) role re-applies it).
  - Disabling MIG on a GPU that has instances destroys them first.
  - A mode change on a GPU that processes use, or that Kubernetes pods hold (the whole GPU or one of its instances,
    with or without a running process, see O(pod_resources)), is an error naming them, and nothing is changed on any
    GPU.
  - GPUs that are not MIG-capable are an error when selected explicitly; matched through V(all) they are reported
    in RV(skipped_gpus) and left alone.
extends_documentation_fragment:
  - gpufleet.mig.nvml
  - gpufleet.mig.nvml.gpus
  - gpufleet.mig.nvml.pod_resources
options:
  gpus:
    required: true
  state:
    description: The MIG mode the GPUs end with.
    type: str
    required: true
    choices: [enabled, disabled]
  allow_reset:
    description:
      - Reset each GPU whose mode change stays pending, when it is idle (the same option, with the same meaning and
        default, as O(gpufleet.mig.nvidia_mig_layout#module:allow_reset) and the role's C(mig_layout_allow_reset)).
      - The default is V(true) because a reset is only tried on a GPU that no process and no pod holds (the change is
        refused before otherwise), the driver itself refuses it while another client holds the GPU (reported in
        RV(gpus[].pending_reason)), and without it the mode asked for is not in effect until a reboot. Before 0.3.0
        this module defaulted to V(false).
      - V(false) leaves a pending mode change for a later reset or reboot and reports RV(gpus[].reset_required).
    type: bool
    default: true
  reset:
    description:
      - Deprecated, will be removed in 1.0.0; use O(allow_reset). V(if_idle) is O(allow_reset=true), V(never) is
        O(allow_reset=false).
    type: str
    choices: [never, if_idle]
attributes:
  check_mode:
    support: full
    description: Reports the same changes without calling any mutating NVML function.
  diff_mode:
    support: full
    description: Shows the mode of each GPU before and after.
author:
  - gpufleet.mig developers (@gpufleet)
'''

EXAMPLES = r'''
- name: Enable MIG on every GPU, resetting idle Ampere GPUs so the mode applies now
  gpufleet.mig.nvidia_mig_mode:
    gpus: [all]
    state: enabled
    allow_reset: true

- name: Disable MIG on GPU 3 only (destroys its idle instances)
  gpufleet.mig.nvidia_mig_mode:
    gpus: [3]
    state: disabled
'''

RETURN = r'''
gpus:
  description: One entry per selected MIG-capable GPU.
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
    before:
      description: MIG mode before, C(current) and C(pending).
      type: dict
      sample: {current: disabled, pending: disabled}
    after:
      description: MIG mode after (predicted in check mode), C(current) and C(pending).
      type: dict
      sample: {current: enabled, pending: enabled}
    reset_required:
      description: The mode is still pending and needs a GPU reset or reboot.
      type: bool
    reset_performed:
      description: Whether the GPU was reset (would be, in check mode).
      type: bool
    pending_reason:
      description:
        - Why the mode is still pending after the change, from NVML's activation status (for example another client
          such as nvidia-persistenced or DCGM holds the GPU), or null.
      type: str
    destroyed_instances:
      description:
        - GPU instances destroyed to disable MIG, with C(id), C(profile), C(placement), the MIG device UUIDs workloads
          know them by (C(mig_uuids)) and the pods that hold them (C(allocated_to)), in the shape of the
          C(destroyed_instances) of M(gpufleet.mig.nvidia_mig_layout).
      type: list
      elements: dict
    changed:
      description: Whether this GPU changed.
      type: bool
skipped_gpus:
  description: GPUs matched through V(all) that are not MIG-capable, with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{index: 1, name: NVIDIA L40S, reason: not MIG-capable}]
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
from ansible_collections.gpufleet.mig.plugins.module_utils.host._mig_mode import ModeDecision, change_mode, clearing_plan, disable_mig
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import destroyed_instances
from ansible_collections.gpufleet.mig.plugins.module_utils._module_support import (
    COMMON_ARGUMENT_SPEC,
    POD_RESOURCES_ARGUMENT_SPEC,
    nvml_session,
    read_pod_resources,
    run_module,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_allocations import host_allocations


def main_body(module):
    wanted_enabled = module.params['state'] == 'enabled'
    allow_reset = module.params['allow_reset'] if module.params['reset'] is None else module.params['reset'] == 'if_idle'
    with nvml_session(module) as backend:
        # Under the host lock, as the GPUs are read: one snapshot of what pods and GPUs hold.
        pod_devices, pod_status = read_pod_resources(module)
        host = backend.read_host()
        holders = host_allocations(host, pod_devices)
        decisions = []
        selected, skipped = select_mig_gpus(host.gpus, module.params['gpus'])
        for gpu in selected:
            decisions.append(ModeDecision(gpu, wanted_enabled, allow_reset, pods=holders.of(gpu.uuid).pods()))
        problems = [d.problem() for d in decisions if d.problem()]
        if problems:
            module.fail_json(msg='; '.join(problems), skipped_gpus=skipped, pod_resources=pod_status)
        planned = []
        for decision in decisions:
            gpu_holders = holders.of(decision.gpu.uuid)
            clear = clearing_plan(decision.gpu, gpu_holders) if decision.needs_set and not wanted_enabled else None
            planned.append((decision, clear, gpu_holders))

        results = []
        for decision, clear, gpu_holders in planned:
            gpu = decision.gpu
            outcome = {'after': decision.after.as_dict(), 'reset_performed': decision.needs_reset, 'pending_reason': None}
            if decision.changed and not module.check_mode:
                # A reset the driver refuses leaves the mode pending with the reason, as in nvidia_mig_layout
                # (one meaning of allow_reset): RV(gpus[].reset_required), not a failure.
                if wanted_enabled:
                    outcome = change_mode(backend, decision, report_refused_reset=True)
                else:
                    outcome = disable_mig(backend, decision, clear, lambda plan, gpu=gpu: apply_plan(backend, gpu, plan),
                                          report_refused_reset=True)
            results.append({
                'index': gpu.index,
                'uuid': gpu.uuid,
                'before': gpu.mig_mode.as_dict(),
                'after': outcome['after'],
                'reset_required': outcome['after']['current'] != outcome['after']['pending'],
                'reset_performed': outcome['reset_performed'],
                'pending_reason': outcome['pending_reason'],
                'destroyed_instances': destroyed_instances(gpu, clear, gpu_holders),
                'changed': decision.changed,
            })

    output = dict(changed=any(r['changed'] for r in results), gpus=results, skipped_gpus=skipped, pod_resources=pod_status)
    if module._diff:
        diff = DiffRecorder()
        for r in results:
            # Modes only: no 'MIG' before each.
            diff.mode(r['index'], r['before'], r['after'], label='')
        output['diff'] = diff.as_dict()
    module.exit_json(**output)


def main():
    argument_spec = dict(
        gpus=dict(type='list', elements='str', required=True),
        state=dict(type='str', required=True, choices=['enabled', 'disabled']),
        allow_reset=dict(type='bool', default=True),
        # Named like nvidia_mig_layout's option since 0.2.0; the old name warns until it goes.
        reset=dict(type='str', choices=['never', 'if_idle'], removed_in_version='1.0.0', removed_from_collection='gpufleet.mig'),
    )
    argument_spec.update(COMMON_ARGUMENT_SPEC)
    argument_spec.update(POD_RESOURCES_ARGUMENT_SPEC)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True, mutually_exclusive=[('allow_reset', 'reset')])
    run_module(module, main_body)


if __name__ == '__main__':
    main()

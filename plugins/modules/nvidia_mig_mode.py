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
  - On Ampere (A100, A30) a mode change stays pending until a GPU reset or reboot; it persists across reboots.
    On Hopper and later (H100, H200, GH200, B200) it applies at once when the GPU is idle and does not persist
    across reboots.
  - Disabling MIG on a GPU that has instances destroys them first, but only if none has running processes; a busy
    GPU is an error naming the processes and nothing is changed on any GPU.
  - GPUs that are not MIG-capable are an error when selected explicitly; matched through V(all) they are reported
    in RV(skipped_gpus) and left alone.
extends_documentation_fragment:
  - gpufleet.mig.nvml
options:
  gpus:
    required: true
  state:
    description: The MIG mode the GPUs end with.
    type: str
    required: true
    choices: [enabled, disabled]
  reset:
    description:
      - V(never) leaves a pending mode change for a later reset or reboot and reports RV(gpus[].reset_required).
      - V(if_idle) resets each GPU whose mode is pending, when no process uses it.
    type: str
    choices: [never, if_idle]
    default: never
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
    reset: if_idle

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
    destroyed_instances:
      description: GPU instances destroyed to disable MIG, with profile and placement.
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
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.mig.plugins.module_utils._gpu_selection import SelectionError, select_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils._module_support import (
    COMMON_ARGUMENT_SPEC,
    nvml_session,
    run_module,
)

# Architectures whose mode change waits for a reset (reset-less switching came with Hopper).
_PENDING_UNTIL_RESET = ('kepler', 'maxwell', 'pascal', 'volta', 'turing', 'ampere')


def _busy_pids(gpu):
    pids = set(p['pid'] for p in gpu['processes'])
    for gi in gpu['gpu_instances']:
        for ci in gi['compute_instances']:
            pids.update(p['pid'] for p in ci['processes'])
    return sorted(pids)


class ModeDecision(object):
    """What one GPU needs: a pure decision from its current state and the wanted mode."""

    def __init__(self, gpu, wanted, reset):
        self.gpu = gpu
        self.wanted = wanted
        mode = gpu['mig_mode']
        self.needs_set = mode['pending'] != wanted
        self.destroy_instances = wanted == 'disabled' and bool(gpu['gpu_instances']) and self.needs_set
        immediate = gpu['architecture'] not in _PENDING_UNTIL_RESET
        current_after = wanted if (self.needs_set and immediate) else mode['current']
        self.needs_reset = reset == 'if_idle' and current_after != wanted
        if self.needs_reset:
            current_after = wanted
        self.after = {'current': current_after, 'pending': wanted}
        self.pids = _busy_pids(gpu)

    @property
    def changed(self):
        return self.needs_set or self.needs_reset

    def problem(self):
        """Why this GPU cannot be changed now, or None."""
        if self.changed and self.pids:
            return 'GPU %d (%s): processes %s use the GPU; stop them before changing MIG mode' % (
                self.gpu['index'], self.gpu['uuid'], self.pids)
        return None


def main_body(module):
    wanted = module.params['state']
    with nvml_session(module) as backend:
        host = backend.read_host(with_profiles=False)
        selected = select_gpus(host['gpus'], module.params['gpus'])
        skipped = []
        decisions = []
        for gpu, explicit in selected:
            if not gpu['mig_capable']:
                if explicit:
                    raise SelectionError('GPU %d (%s) is not MIG-capable' % (gpu['index'], gpu['name']))
                skipped.append({'index': gpu['index'], 'name': gpu['name'], 'reason': 'not MIG-capable'})
                continue
            decisions.append(ModeDecision(gpu, wanted, module.params['reset']))
        problems = [d.problem() for d in decisions if d.problem()]
        if problems:
            module.fail_json(msg='; '.join(problems), skipped_gpus=skipped)

        results = []
        for decision in decisions:
            index = decision.gpu['index']
            destroyed = []
            if decision.destroy_instances:
                for gi in decision.gpu['gpu_instances']:
                    destroyed.append({'id': gi['id'], 'profile': gi['profile'], 'placement': gi['placement']})
                    if not module.check_mode:
                        for ci in gi['compute_instances']:
                            backend.destroy_compute_instance(index, gi['id'], ci['id'])
                        backend.destroy_gpu_instance(index, gi['id'])
            after = decision.after
            reset_performed = decision.needs_reset
            if not module.check_mode:
                if decision.needs_set:
                    backend.set_mig_mode(index, wanted == 'enabled')
                reset_performed = False
                if module.params['reset'] == 'if_idle' and backend.read_gpu(index, with_profiles=False)['mig_mode']['current'] != wanted:
                    backend.reset_gpu(index)
                    reset_performed = True
                after = backend.read_gpu(index, with_profiles=False)['mig_mode']
            results.append({
                'index': index,
                'uuid': decision.gpu['uuid'],
                'before': dict(decision.gpu['mig_mode']),
                'after': dict(after),
                'reset_required': after['current'] != after['pending'],
                'reset_performed': reset_performed,
                'destroyed_instances': destroyed,
                'changed': decision.needs_set or bool(destroyed) or reset_performed,
            })

    changed = any(r['changed'] for r in results)
    output = dict(changed=changed, gpus=results, skipped_gpus=skipped)
    if module._diff:
        output['diff'] = {
            'before': ''.join('GPU %d: current=%s pending=%s\n' % (r['index'], r['before']['current'], r['before']['pending']) for r in results),
            'after': ''.join('GPU %d: current=%s pending=%s\n' % (r['index'], r['after']['current'], r['after']['pending']) for r in results),
        }
    module.exit_json(**output)


def main():
    argument_spec = dict(
        gpus=dict(type='list', elements='str', required=True),
        state=dict(type='str', required=True, choices=['enabled', 'disabled']),
        reset=dict(type='str', default='never', choices=['never', 'if_idle']),
    )
    argument_spec.update(COMMON_ARGUMENT_SPEC)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    run_module(module, main_body)


if __name__ == '__main__':
    main()

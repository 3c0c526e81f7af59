#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: nvidia_mig_layout
short_description: Bring every GPU of a host to a named MIG layout in one call, and keep it there across reboots
version_added: 0.2.0
description:
  - Takes a MIG layout in NVIDIA mig-parted's v1 format (the C(mig-configs) mapping, at least the layout named by
    O(name)), matches its entries to the GPUs of the host as mig-parted does, and plans the MIG mode and the
    instances of every GPU with the collection's placement planner. Everything is decided before the first change;
    busy instances (running processes, or allocated to a pod) are never destroyed. A GPU whose MIG is still off is
    checked too, as far as NVML tells with MIG off (RV(gpus[].checked_with)); a profile it cannot offer fails before
    any GPU of the host changes.
  - Unless O(apply=false) or check mode, applies the plan (mode, a reset of an idle GPU when allowed, instances)
    and verifies the result by reading the GPUs again.
  - NVML describes a GPU's profiles only while MIG is enabled. A GPU whose MIG is still off is planned in two steps
    (RV(gpus[].deferred)), its instances once the mode step has enabled MIG.
  - Keeps what the boot-time re-apply needs on the host, each file written only when its content differs, and only once
    the host holds the layout (see O(apply)). That is the declared layout, the collection's host code (taken from this
    module's own payload), the C(gpufleet-mig-apply) command, the systemd boot unit, and optionally the metrics
    textfile with its refresh timer.
  - Stops the host's GPU clients (systemd services such as DCGM) while the GPUs change, and starts them again.
  - Refuses to act when another owner of MIG (the C(nvidia-mig-manager) service) runs or is enabled.
  - A change that fails outside this module (an eviction refused, a reboot) is recorded with
    P(gpufleet.mig.nvidia_mig_layout_failure#module).
extends_documentation_fragment:
  - gpufleet.mig.nvml
  - gpufleet.mig.nvml.pod_resources
options:
  name:
    description: The layout to apply, a key of O(config).
    type: str
    required: true
  config:
    description:
      - A whole mig-parted v1 file (a mapping with C(version) and C(mig-configs)), or its C(mig-configs) mapping
        (layout name to a list of entries with C(devices), C(device-filter), C(mig-enabled) and C(mig-devices)), or
        just the layout named by O(name). A mapping with a C(mig-configs) key, or a string C(version), is read as a
        whole file.
      - The layout named by O(name) is validated strictly; problems in other layouts are reported in
        RV(layout_problems).
    type: dict
    required: true
  apply:
    description:
      - V(false) decides and reports without changing any GPU. The host's files are then kept current only when the
        host already holds the layout.
      - The declared layout and the boot unit change only when the host holds the new layout, or when the apply
        brought it there (a MIG mode pending a reboot included). After a refused or failed change, a reboot applies
        the previous declared layout.
    type: bool
    default: true
  allow_reset:
    description:
      - Reset an idle GPU whose MIG mode change stays pending (also at boot). The same option, with the same default,
        as O(gpufleet.mig.nvidia_mig_mode#module:allow_reset) (which says why V(true)) and the role's
        C(mig_layout_allow_reset).
    type: bool
    default: true
  unmatched:
    description:
      - What to do with a MIG-capable GPU that no entry of the layout matches.
      - V(ignore) leaves it as it is, as mig-parted does, and reports it in RV(unmatched_gpus); V(fail) fails.
    type: str
    choices: [ignore, fail]
    default: ignore
  gpu_clients:
    description:
      - systemd services that hold the GPUs; those running are stopped while the GPUs change and started after.
      - By default the GPU clients NVIDIA ships (DCGM, dcgm-exporter, nvsm). A DCGM holding a MIG device makes NVML
        refuse to destroy it with C(NVML_ERROR_IN_USE) and no process listed. An empty list stops none.
      - A destroy still refused that way fails the GPU as busy, naming the client to stop; RV(gpu_states) then says
        where every GPU stands.
    type: list
    elements: str
    default: [nvidia-dcgm.service, dcgm-exporter.service, nvsm.service]
  other_owner_units:
    description: systemd units that own MIG when running or enabled (another owner would undo our layouts).
    type: list
    elements: str
    default: [nvidia-mig-manager.service]
  allow_other_owner:
    description: Act even when one of O(other_owner_units) runs or is enabled.
    type: bool
    default: false
  systemd:
    description:
      - The host runs systemd. V(false) skips every systemctl call (enabling units, GPU clients, the owner check);
        the unit files are still written.
      - Unset, it is detected as Ansible's C(ansible_service_mgr) fact does it, C(systemctl) on C(PATH) and
        C(/run/systemd/system/) present or C(systemd) as PID 1 (containers, the GPU operator's way, have neither).
      - A decision (O(apply=false)) and check mode never call C(systemctl), whatever this option says; the owner check
        reads the units' links and running units on disk, and the unit files and units to enable are told in
        RV(persistence.pending) for an apply. An apply with V(true) on a host without C(systemctl) fails before any
        change, naming this option.
      - An apply whose GPUs reached the layout but whose C(systemctl) call then failed (a host with C(systemctl) that
        systemd did not boot) succeeds with the warning C(MIG layout <name> applied, boot persistence failed) and its reason,
        and RV(persistence.error); C(last_apply.json) records the GPUs' success and C(boot_persistence.json) the
        failure (metric C(gpufleet_mig_boot_persistence_success)).
    type: bool
  boot_persistence:
    description: Install and enable the systemd unit that re-applies the declared layout at boot.
    type: bool
    default: true
  config_dir:
    description: Folder of the declared layout C(layout.json) and the last apply record.
    type: path
    default: /etc/gpufleet-mig
  lib_dir:
    description: Folder the collection's host code goes to (the boot unit and the metrics timer run it).
    type: path
    default: /usr/local/lib/gpufleet-mig
  bin_dir:
    description: Folder of the C(gpufleet-mig-apply) command.
    type: path
    default: /usr/local/sbin
  systemd_dir:
    description: Folder of the unit files.
    type: path
    default: /etc/systemd/system
  python:
    description: Python that runs the boot unit and the metrics timer (needs nvidia-ml-py); empty is the one running this module.
    type: str
    default: ''
  boot_environment:
    description: Environment of the boot unit and the metrics timer.
    type: dict
    default: {}
  metrics_dir:
    description:
      - Prometheus textfile-collector folder for C(gpufleet_mig.prom), refreshed by this module and, with O(systemd),
        every minute by a timer. Empty writes no metrics.
    type: path
    default: ''
  evict:
    description:
      - Decide for an in-place switch of a Kubernetes node, as the P(gpufleet.mig.mig_layout#role) role does. Instances
        held by pods may go, as few as possible, and RV(pods_to_evict) names the pods to evict before the apply.
      - Needs O(apply=false); the apply itself keeps every held instance.
    type: bool
    default: false
  defer_pending:
    description:
      - A MIG mode change that would stay pending until a reboot is set back at once on that GPU (action C(revert_mig_mode)),
        the layout is not declared, and RV(reboot_required) is true. The P(gpufleet.mig.mig_layout#role) role drains the
        Kubernetes node first, then applies again without this option, so the new layout and the pending mode are declared
        only once the drain succeeded.
    type: bool
    default: false
  drain:
    description:
      - With O(evict), RV(pods_to_evict) names every pod that holds any device of the host's GPUs (the role's drain and
        drain fallback), found by device id from the same pod-resources as in place (renamed resources and DRA claims
        included), or from the cgroups of the GPU processes where pod-resources were not read.
    type: bool
    default: false
  create_only:
    description:
      - The demand fast path's guard (playbooks/mig_demand_create.yml), GPU index to the count of each profile it expects
        to create there, for example GPU C(0) to C(1g.20gb) C(1).
      - The change must be exactly those GPU instances created in free slices, their compute instances included.
        A destroy, a MIG mode change, a reset or any other create fails before any GPU changes, naming what the GPUs
        would need (the free slices the decision was made on are gone). A host already in the layout changes nothing.
    type: dict
  destroy_idle:
    description:
      - With O(create_only), the idle GPU instances the gated queue of the demand event source expects to destroy first,
        in the same form (GPU index to the count of each profile). The change must then be exactly those destroys and
        the creates; anything else fails before any GPU changes.
      - An instance a pod holds (by device id, from pod-resources) or a process uses is never destroyed. The plan keeps
        it, and the change then differs from the one expected and is refused.
    type: dict
  persistence_only:
    description:
      - With O(apply=true), install only the boot persistence of a host that already holds the layout (its unit files,
        and C(systemctl enable)). The P(gpufleet.mig.mig_layout#role) role makes this call after a decision, which never
        calls C(systemctl), left it pending (RV(persistence.pending)).
      - A host whose GPUs no longer hold the layout (they changed since that decision) is refused before anything
        changes. No GPU is changed by such a call, so none is changed without the role's Kubernetes hand-over.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Decides and reports the same plan and the files that would change; calls no mutating NVML function.
  diff_mode:
    support: full
    description: Shows each GPU's mode and instances before and after.
author:
  - gpufleet.mig developers (@gpufleet)
seealso:
  - module: gpufleet.mig.nvidia_mig_instance
  - module: gpufleet.mig.nvidia_mig_mode
  - module: gpufleet.mig.nvidia_mig_facts
  - module: gpufleet.mig.nvidia_mig_layout_failure
'''

EXAMPLES = r'''
- name: Decide only - does this host differ from the nighttime layout of a whole mig-parted file?
  gpufleet.mig.nvidia_mig_layout:
    name: nighttime
    config: "{{ lookup('ansible.builtin.file', 'catalog.yml') | from_yaml }}"
    apply: false
  register: decision

- name: Apply it (the GPU clients are stopped while the GPUs change)
  gpufleet.mig.nvidia_mig_layout:
    name: nighttime
    config:
      nighttime:
        - devices: all
          mig-enabled: true
          mig-devices:
            3g.40gb: 2
    gpu_clients: [nvidia-dcgm.service, dcgm-exporter.service]
    metrics_dir: /var/lib/node_exporter/textfile_collector
  when: not decision.in_layout
'''

RETURN = r'''
layout:
  description: The layout name.
  returned: always
  type: str
in_layout:
  description: Every matched GPU holds the layout (after the apply; as found, with O(apply=false) or in check mode).
  returned: always
  type: bool
reboot_required:
  description:
    - A MIG mode change is pending and only a GPU reset (not allowed or refused) or a reboot applies it; with
      O(defer_pending), also when such a change was set back (RV(actions) has C(revert_mig_mode)).
  returned: always
  type: bool
gpus:
  description: One entry per GPU that an entry of the layout matches, as decided before the change.
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
    name:
      description: Model name as NVML reports it.
      type: str
    pci_device_id:
      description: PCI device id in mig-parted form.
      type: str
    entries:
      description: Positions of the layout's entries that match this GPU (the last one wins).
      type: list
      elements: int
    mig_enabled:
      description: The MIG mode the layout wants.
      type: bool
    mig_devices:
      description: The C(mig-devices) of the winning entry, as written; null while the entry is undecided (RV(gpus[].candidates)).
      type: dict
    candidates:
      description:
        - While MIG is still off and the winning entry depends on the GPU's memory slices (C(gpufleet-memory-slices)),
          which NVML reports only once MIG is enabled, the entries that may apply, in order, each with C(entry),
          C(memory_slices) and C(mig_devices). Empty once the entry is decided.
      type: list
      elements: dict
    instances:
      description: Those instances resolved to the profiles this GPU offers; null until MIG is enabled.
      type: dict
    mode:
      description: MIG mode C(before) and C(after) (predicted), each with C(current) and C(pending).
      type: dict
    in_layout:
      description: Mode and instances already as the layout wants.
      type: bool
    reboot_required:
      description: The wanted mode is pending.
      type: bool
    deferred:
      description: MIG is still off, so the instances are planned after the mode step (RV(gpus[].note)).
      type: bool
    note:
      description: Why the instances are not planned yet, or null.
      type: str
    checked_with:
      description:
        - While MIG is off (RV(gpus[].deferred)), what the entry was checked against before any GPU of the host changed,
          in words. The profiles the driver describes for the GPU with MIG off where it does (driver 580.159.04 on an
          H200), else those of a GPU of the same model with MIG enabled, else a forecast from the possible
          placements NVML answers with MIG off (the memory slices) and NVIDIA's profile naming rule, else nothing.
          Null when the instances are planned already.
      type: str
    before:
      description: GPU instances before, sorted by placement.
      type: list
      elements: dict
    after:
      description: GPU instances the plan ends with; null when deferred.
      type: list
      elements: dict
    actions:
      description: The planned steps in order (C(set_mig_mode), C(reset_gpu), instance destroys and creates).
      type: list
      elements: dict
    destroyed_instances:
      description:
        - GPU instances the plan destroys, with the MIG device UUIDs workloads know them by and the pods that hold
          them (C(allocated_to)).
      type: list
      elements: dict
    pods_to_evict:
      description:
        - This GPU's part of RV(pods_to_evict) (pods on the instances the plan destroys, on the whole GPU when its
          MIG mode changes, or in RV(gpus[].index_id_pods)). Only with O(evict) can it be non-empty.
      type: list
      elements: str
    index_id_pods:
      description:
        - Pods that hold one of this GPU's MIG devices by index id (C(<gpu>:<mig device>), the device plugin's
          C(deviceIDStrategy=index)) while the plan changes the GPU's MIG devices. An index id is a position in the
          GPU's list of MIG devices, which any created or destroyed instance may shift, so these pods go whichever
          instance they hold; without O(evict) the change is refused while they hold it.
      type: list
      elements: str
    free_space_after:
      description: Free-space figures after the plan; null when deferred.
      type: dict
actions:
  description: What was done (empty with O(apply=false), in check mode and when in layout), each with its C(gpu).
  returned: always
  type: list
  elements: dict
unmatched_gpus:
  description:
    - MIG-capable GPUs no entry matches, left as they are, with the reason.
    - Also returned by the refusal of a host where the layout matches none of its MIG-capable GPUs.
  returned: always
  type: list
  elements: dict
skipped_gpus:
  description: GPUs without MIG that are left alone.
  returned: always
  type: list
  elements: dict
layout_problems:
  description: Problems found in the other layouts of O(config) (not applied, so not fatal), by layout name.
  returned: always
  type: dict
files:
  description: Files on the host that changed (would change, in check mode).
  returned: always
  type: list
  elements: str
gpu_states:
  description:
    - When an apply stops part-way (a failure), where every GPU stands, in order. C(index), C(uuid), C(status)
      (C(in layout), C(applied), C(failed), C(not started)), the actions C(done) on it, the planned actions C(left),
      and for the GPU that failed its C(reason) and its instances as NVML reports them now (C(layout_now)).
  returned: failure of an apply
  type: list
  elements: dict
systemd:
  description: Whether this run took the host for a systemd host (O(systemd), or detected when it is unset).
  returned: always
  type: bool
persistence:
  description:
    - The boot persistence. C(pending) (a decision or check mode on a systemd host whose GPUs hold the layout) the unit
      files that differ and the units not enabled, which only an apply installs (through C(systemctl)); C(error) (an
      apply) the one line of the C(systemctl) call that failed, the GPUs being as the run left them, or null.
  returned: always
  type: dict
  contains:
    pending:
      description: The unit files that differ and the units not enabled, left for an apply (a decision or check mode).
      type: list
      elements: str
      sample: [gpufleet-mig-layout.service]
    error:
      description: The failed C(systemctl) call of an apply, in one line, or null.
      type: str
      sample: null
gpus_changed:
  description:
    - On a failed apply, whether an NVML change may have been made (V(false) only when the apply was refused before the first
      one; the mig_layout role then hands the Kubernetes node back uncordoned).
      Absent where unknown (an unexpected error), which counts as changed.
  returned: failure of an apply
  type: bool
clients_stopped:
  description: GPU client services stopped during the change and started again.
  returned: always
  type: list
  elements: str
pods_to_evict:
  description:
    - Pods (C(namespace/name), or C(uid:<pod uid>) when only their cgroup names them) whose instances the plan
      destroys, that hold a whole GPU whose MIG mode changes, or that hold a MIG device by index id on a GPU whose MIG
      devices change (RV(gpus[].index_id_pods)); RV(eviction_reasons) says which. Only with O(evict) can it be
      non-empty.
  returned: always
  type: list
  elements: str
eviction_reasons:
  description:
    - Why each pod of RV(pods_to_evict) must go, by pod (on an instance the plan destroys, on a whole GPU whose MIG
      mode changes, or holding an index id on a GPU whose MIG devices change).
  returned: always
  type: dict
pod_resources:
  description:
    - C(read) (whether the kubelet's pod-resources API answered), C(reason) when it did not, C(allocations) (every
      container holding a GPU resource's device, or a GPU-shaped device id under any resource name, with its device ids)
      and C(pods) (the pods that hold a device of the host's GPUs, by device id).
  returned: always
  type: dict
resources:
  description:
    - The extended resources NVIDIA's device plugin (mixed MIG strategy) advertises for the GPUs as they end, for
      example C(nvidia.com/mig-3g.40gb) 4. The role waits for the node's allocatable to match it.
  returned: always
  type: dict
expected_device_ids:
  description:
    - The device ids NVIDIA's device plugin should advertise once it has enumerated the GPUs as they end (after the
      change, or as they are), by resource and by the plugin's C(deviceIDStrategy), to compare as sets with what the
      kubelet's C(GetAllocatableResources) lists (P(gpufleet.mig.nvidia_mig_facts#module) with C(kubelet_allocatable))
      before the node is declared ready.
    - C(uuid) holds C(MIG-<uuid>) per MIG device and C(GPU-<uuid>) per GPU without MIG, C(index) holds
      C(<gpu index>:<mig device index>) and C(<gpu index>). Only GPU instances with one full-size compute instance
      are advertised (as C(nvidia.com/mig-<profile>)); GPUs without MIG are C(nvidia.com/gpu).
    - With time-slicing or MPS the plugin advertises each id once per replica, as C(<id>::<n>), and under the
      C(.shared) name with C(renameByDefault).
  returned: always
  type: dict
  sample:
    nvidia.com/mig-3g.40gb:
      uuid: [MIG-1d2e3f4a-0b1d-5e7f-9a3c-4f8a6c2e5b6c, MIG-9e8d7c6b-5a4f-5e3d-8c2b-1a0f9e8d7c6b]
      index: ["0:0", "0:1"]
    nvidia.com/gpu:
      uuid: [GPU-0a1b2c3d-4e5f-5a6b-9c8d-7e6f5a4b3c2d]
      index: ["1"]
'''

from ansible.module_utils.basic import AnsibleModule

# First of the collection's imports: from the module's payload, the others are then compiled once each (_payload_import).
from ansible_collections.gpufleet.mig.plugins.module_utils import _payload_import  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpufleet.mig.plugins.module_utils._diff_recorder import layout_run_diff
from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_run import LayoutRun, LayoutRunFailure
from ansible_collections.gpufleet.mig.plugins.module_utils._module_support import (
    COMMON_ARGUMENT_SPEC,
    POD_RESOURCES_ARGUMENT_SPEC,
    nvml_session,
    read_pod_resources,
    run_module,
)


def main_body(module):
    try:
        run = LayoutRun(module.params, module.check_mode, module.get_bin_path('systemctl'), module.run_command)
        with nvml_session(module, exclusive=not module.check_mode) as backend:
            output, warnings, (before, after) = run.on_host(backend, *read_pod_resources(module))
    except LayoutRunFailure as exc:
        module.fail_json(msg=str(exc), **exc.result)
    for warning in warnings:
        module.warn(warning)
    if module._diff:
        output['diff'] = layout_run_diff(before, after)
    module.exit_json(**output)


def main():
    argument_spec = dict(
        name=dict(type='str', required=True),
        config=dict(type='dict', required=True),
        apply=dict(type='bool', default=True),
        allow_reset=dict(type='bool', default=True),
        unmatched=dict(type='str', default='ignore', choices=['ignore', 'fail']),
        gpu_clients=dict(type='list', elements='str', default=['nvidia-dcgm.service', 'dcgm-exporter.service', 'nvsm.service']),
        other_owner_units=dict(type='list', elements='str', default=['nvidia-mig-manager.service']),
        allow_other_owner=dict(type='bool', default=False),
        systemd=dict(type='bool'),
        boot_persistence=dict(type='bool', default=True),
        config_dir=dict(type='path', default='/etc/gpufleet-mig'),
        lib_dir=dict(type='path', default='/usr/local/lib/gpufleet-mig'),
        bin_dir=dict(type='path', default='/usr/local/sbin'),
        systemd_dir=dict(type='path', default='/etc/systemd/system'),
        python=dict(type='str', default=''),
        boot_environment=dict(type='dict', default={}),
        metrics_dir=dict(type='path', default=''),
        evict=dict(type='bool', default=False),
        drain=dict(type='bool', default=False),
        defer_pending=dict(type='bool', default=False),
        create_only=dict(type='dict'),
        destroy_idle=dict(type='dict'),
        persistence_only=dict(type='bool', default=False),
    )
    argument_spec.update(COMMON_ARGUMENT_SPEC)
    argument_spec.update(POD_RESOURCES_ARGUMENT_SPEC)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    run_module(module, main_body)


if __name__ == '__main__':
    main()

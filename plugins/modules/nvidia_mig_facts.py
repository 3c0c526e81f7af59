#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: nvidia_mig_facts
short_description: Read NVIDIA MIG mode, profiles, instances and free space through NVML
version_added: 0.1.0
description:
  - Reads every selected GPU through NVML (the official C(nvidia-ml-py) bindings) and returns
    C(ansible_facts.nvidia_mig) with MIG mode, the GPU instance profiles with their placements as NVML reports
    them, GPU and compute instances with their processes, and free-space figures (what still fits,
    stranded slices, fragmentation).
  - Never parses C(nvidia-smi) output and never changes anything.
extends_documentation_fragment:
  - gpufleet.mig.nvml
  - gpufleet.mig.nvml.gpus
  - gpufleet.mig.nvml.pod_resources
options:
  gpus:
    default: [all]
  layout_file:
    description:
      - The declared layout that P(gpufleet.mig.nvidia_mig_layout#module) keeps on the host (C(<config_dir>/layout.json)),
        by default where that module keeps it with its default O(gpufleet.mig.nvidia_mig_layout#module:config_dir).
        When it exists, the facts say whether each GPU holds it (RV(ansible_facts.nvidia_mig.gpus[].in_layout)).
      - A file that does not exist (a host no layout was declared on) means no declared layout; empty reads none.
    type: path
    default: /etc/gpufleet-mig/layout.json
  summary:
    description:
      - Return only RV(ansible_facts.nvidia_mig_summary), what C(playbooks/mig_report.yml) and the fleet map
        (P(gpufleet.mig.mig_fleet_map#filter)) need of each GPU, computed here on the host, with the time it was read,
        instead of the facts (no RV(ansible_facts.nvidia_mig) is set).
      - A few KB per host instead of every profile with its placements and compute profiles, so that a fleet's report
        does not carry the whole facts of every host through the controller. C(playbooks/mig_layout.yml) reads it, not
        the facts, in its pre-flight of the hosts whose GPUs it does not know yet (P(gpufleet.mig.mig_layout_known_gpus#filter)).
      - A fact, so that a fact cache (AWX fact storage, ansible-core C(fact_caching)) keeps it, and the report with
        C(mig_report_source=cache) draws the fleet from it without contacting any host.
    type: bool
    default: false
  kubelet_allocatable:
    description:
      - Also read the kubelet's C(GetAllocatableResources) over O(pod_resources_socket), the device ids the device
        plugins advertise now (RV(ansible_facts.nvidia_mig.kubelet_allocatable)), to compare as sets with
        RV(gpufleet.mig.nvidia_mig_layout#module:expected_device_ids) after a change. Costs nothing unless set.
      - Fails when the kubelet cannot answer it (no socket, Kubernetes before 1.23, ...), and with O(pod_resources=off).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Reads only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  facts:
    support: full
    description: Returns C(ansible_facts.nvidia_mig).
author:
  - gpufleet.mig developers (@gpufleet)
'''

EXAMPLES = r'''
- name: Read MIG facts of every GPU, and whether each holds the layout declared on the host
  gpufleet.mig.nvidia_mig_facts:

- name: Read only the A100-80GB GPUs
  gpufleet.mig.nvidia_mig_facts:
    gpus: ["0x20B210DE"]

- name: After a change, compare the device ids the kubelet lists with those the layout module expects
  gpufleet.mig.nvidia_mig_facts:
    kubelet_allocatable: true

- name: Only what the report and the fleet map need (a few KB per host, as the fact nvidia_mig_summary)
  gpufleet.mig.nvidia_mig_facts:
    summary: true

- name: Show the report's line per GPU and when the host was read
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia_mig_summary.lines }} (read {{ ansible_facts.nvidia_mig_summary.read_at }})"

- name: Show what still fits on GPU 0
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia_mig.gpus[0].placeable }}"
'''

RETURN = r'''
ansible_facts:
  description: Facts under C(nvidia_mig), or with O(summary=true) under C(nvidia_mig_summary) only.
  returned: always
  type: dict
  contains:
    nvidia_mig_summary:
      description:
        - What the report and the fleet map need of the host, computed from the same facts, and C(read_at), when the host
          read them (UTC, C(2026-12-04T06:00:00Z); the host's clock).
        - C(layout), the declared layout or null; C(lines), the report's line per GPU; C(totals) (C(gpus), C(mig_enabled),
          C(out_of_layout), C(instances), C(free_slices), C(stranded_slices), C(busy_gpus)); C(map), the GPUs as the map
          draws them, as one JSON text (one value per host, since ansible-core handles every value of a result several times).
        - C(map) is a list, per GPU C(index), C(uuid), C(name), C(pci_device_id), C(pci_subsystem_id) (what the rollout's
          pre-flight matches a layout's device-filters with), C(mig_capable), C(mig_mode) (C(current), C(pending);
          V(unsupported) without MIG), C(in_layout), C(processes) (pids), C(allocated_to), C(total_slices), C(slices) (per
          memory slice V(free), V(stranded), V(unusable) or the position in C(gpu_instances) of the instance covering it),
          C(figures) (C(free_slices), C(stranded_slices), C(largest_placeable), C(fragmentation),
          C(repacked_largest_placeable); null while MIG is off), C(ranks) (the sort order of the profiles C(figures) names)
          and C(gpu_instances) (C(id), C(profile), C(start), C(size), C(compute_instances) profile names, C(pids), C(busy),
          C(allocated_to)).
      returned: when O(summary=true)
      type: dict
      sample:
        read_at: "2026-12-04T06:00:00Z"
        layout: daytime
        lines: ["GPU 0 A30: MIG enabled, 4x1g.6gb; 0 free slice(s), largest placeable -, 0 stranded, fragmentation 0.00, in layout"]
        totals: {gpus: 1, mig_enabled: 1, out_of_layout: 0, instances: 4, free_slices: 0, stranded_slices: 0, busy_gpus: 0}
        map: '[{"allocated_to":[],"figures":{"fragmentation":0.0,"free_slices":0,"largest_placeable":null,...},...}]'
    nvidia_mig:
      description: MIG state of the host.
      returned: unless O(summary=true)
      type: dict
      contains:
        driver_version:
          description: NVIDIA driver version.
          type: str
          sample: 580.95.05
        nvml_version:
          description: NVML library version.
          type: str
          sample: 13.580.95.05
        simulated:
          description: Whether the GPUs come from the gpufleet.mig simulator.
          type: bool
        pod_resources:
          description: C(read) (whether the kubelet's pod-resources API answered) and C(reason) when it did not.
          type: dict
        layout:
          description: The name of the declared layout of O(layout_file), or null.
          type: str
        kubelet_allocatable:
          description:
            - The device ids the kubelet lists per GPU resource (C(nvidia.com/gpu), C(nvidia.com/mig-<profile>), either
              also C(.shared)), sorted; a shared device once per replica (C(<id>::<n>)). A resource under another
              name (the device_plugin role's C(rename)) is listed when its ids name GPU or MIG devices; other resources
              are left out.
          returned: when O(kubelet_allocatable=true)
          type: dict
          sample:
            nvidia.com/mig-1g.10gb: ["0:0", "0:1", "0:2"]
        gpus:
          description: One entry per selected GPU, in index order.
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
              description: Product name as NVML reports it.
              type: str
              sample: NVIDIA A100-SXM4-80GB
            pci_device_id:
              description: PCI device id in mig-parted form.
              type: str
              sample: "0x20B210DE"
            pci_subsystem_id:
              description: PCI subsystem id in mig-parted form (some device filters name it).
              type: str
              sample: "0x147E10DE"
            pci_bus_id:
              description: PCI bus id.
              type: str
            architecture:
              description: GPU architecture (ampere, hopper, blackwell, ...).
              type: str
            memory_total_mib:
              description: Total framebuffer memory in MiB.
              type: int
            minor_number:
              description:
                - The GPU's device minor number (C(/dev/nvidia<minor>)), which need not equal its index; NVIDIA's DRA
                  driver names its devices after it (C(gpu-<minor>), C(gpu-<minor>-mig-...)). Null where NVML cannot
                  tell.
              type: int
            mig_capable:
              description: Whether the GPU supports MIG.
              type: bool
            mig_mode:
              description: MIG mode, C(current) and C(pending), each V(enabled) or V(disabled).
              type: dict
            reset_required:
              description: A mode change is pending until a GPU reset or reboot.
              type: bool
            in_layout:
              description:
                - Whether the GPU holds the declared layout of O(layout_file); null without one, for a GPU no entry
                  matches (left as it is), and for GPUs without MIG.
              type: bool
            allocated_to:
              description:
                - Pods that hold the whole GPU (C(namespace/name); C(uid:<pod uid>) when only a process's cgroup names
                  the pod). Each of RV(ansible_facts.nvidia_mig.gpus[].gpu_instances) has its own C(allocated_to).
              type: list
              elements: str
            profiles_known:
              description:
                - Whether RV(ansible_facts.nvidia_mig.gpus[].profiles) could be read. NVML describes a GPU's profiles
                  only while MIG is enabled, so a MIG-disabled GPU has no profiles and no free-space figures (null)
                  until MIG is on; RV(ansible_facts.nvidia_mig.gpus[].profiles_note) says so.
              type: bool
            profiles_note:
              description: Why the profiles and figures are missing.
              type: str
              returned: when MIG is disabled on a MIG-capable GPU
            placements_without_mig:
              description:
                - What NVML tells of the profiles while MIG is off, its possible placements by profile id (C(profile_id),
                  C(placements) each with C(start) and C(size) in memory slices); they give the GPU's memory slices.
              type: list
              elements: dict
              returned: when MIG is disabled on a MIG-capable GPU
            profiles_without_mig:
              description:
                - The GPU instance profiles the driver describes while MIG is off, in the form of
                  RV(ansible_facts.nvidia_mig.gpus[].profiles). nvml.h says a driver describes none until MIG is enabled;
                  some do all the same (driver 580.159.04 on an H200), and nvidia_mig_layout then checks a layout
                  against them before any change.
              type: list
              elements: dict
              returned: when MIG is disabled on a MIG-capable GPU whose driver describes its profiles then
            profiles:
              description:
                - GPU instance profiles as NVML reports them (empty when not MIG-capable or while MIG is disabled).
                - C(compute_profiles_source) is V(nvml) when read from an existing GPU instance, V(derived) when
                  no instance of that profile exists yet (NVML only describes compute profiles of existing ones).
              type: list
              elements: dict
              sample:
                - name: 3g.40gb
                  id: 9
                  compute_slices: 3
                  memory_slices: 4
                  memory_mib: 40192
                  max_count: 2
                  placements: [{start: 0, size: 4}, {start: 4, size: 4}]
            gpu_instances:
              description:
                - GPU instances with placement, compute instances (each with the C(uuid) of its MIG device) and their
                  processes.
              type: list
              elements: dict
              sample:
                - id: 2
                  profile: 3g.40gb
                  placement: {start: 4, size: 4}
                  busy: true
                  compute_instances:
                    - id: 0
                      profile: 3g.40gb
                      placement: {start: 0, size: 3}
                      processes: [{pid: 4242, used_memory_mib: 1024}]
            processes:
              description: Processes on the GPU itself (MIG disabled).
              type: list
              elements: dict
            busy:
              description: Whether any process runs on the GPU or one of its instances.
              type: bool
            free_slices:
              description: Memory slices no GPU instance covers (null while MIG is disabled, the profiles being unknown).
              type: int
            placeable:
              description: Profile name to how many more instances of it alone still fit.
              type: dict
              sample: {1g.10gb: 3, 2g.20gb: 1, 3g.40gb: 1, 7g.80gb: 0}
            largest_placeable:
              description: The largest profile that still fits, or null.
              type: str
            stranded_slices:
              description:
                - Free memory slices that no still-placeable profile can use as the instances are placed, but that the
                  best rearrangement of the same instances would make usable. V(0) after 7x1g on an A100 (every compute
                  slice is taken) and on every layout of the default catalog.
              type: int
            fragmentation:
              description:
                - V(1 - largest_placeable_slices / largest placeable slices after the best rearrangement of the same
                  instances); V(0.0) when the placement already fits the largest profile any arrangement could (a full
                  GPU included), V(0.5) when a repack would fit an instance twice as big.
              type: float
            skip_reason:
              description: Why figures are missing, for GPUs that are not MIG-capable.
              type: str
              returned: when the GPU is not MIG-capable
'''

import datetime
import os

from ansible.module_utils.basic import AnsibleModule

# First of the collection's imports: from the module's payload, the others are then compiled once each (_payload_import).
from ansible_collections.gpufleet.mig.plugins.module_utils import _payload_import  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpufleet.mig.plugins.module_utils.host._gpu_selection import select_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils._module_support import (
    COMMON_ARGUMENT_SPEC,
    POD_RESOURCES_ARGUMENT_SPEC,
    nvml_session,
    read_pod_resources,
    run_module,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import NOBODY
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_record import DeclaredLayoutError, load_layout
from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_converge import in_layout_by_uuid
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_resources import PodResourcesUnavailable, allocatable_gpu_device_ids
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import free_space
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_summary import MapInputError, cached_summary, host_summary
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_allocations import host_allocations


# Where nvidia_mig_layout keeps the declared layout with its default config_dir.
DEFAULT_LAYOUT_FILE = '/etc/gpufleet-mig/layout.json'


def gpu_facts(gpu, holders=NOBODY):
    """The facts of one GPU (_host_model.Gpu), as plain data. ``holders``: the pods that hold this GPU, on the
    whole GPU and per instance (_host_model.GpuHolders)."""
    facts = gpu.as_dict()
    facts.pop('unsupported_profiles', None)
    facts['allocated_to'] = list(holders.gpu)
    facts['gpu_instances'] = [dict(gi.as_dict(), allocated_to=list(holders.of_instance(gi.id))) for gi in gpu.gpu_instances]
    facts['busy'] = gpu.busy
    if not gpu.mig_capable:
        facts.update(free_slices=0, placeable={}, largest_placeable=None, stranded_slices=0, fragmentation=0.0,
                     skip_reason='GPU %d (%s) is not MIG-capable' % (gpu.index, gpu.name))
        return facts
    if not gpu.profiles_known:
        # NVML describes profiles only while MIG is enabled: no figure can be known yet.
        facts.update(free_slices=None, placeable={}, largest_placeable=None, stranded_slices=None, fragmentation=None,
                     profiles_note='MIG is disabled: NVML describes the profiles (and so the free space) only once MIG is enabled')
        return facts
    figures = free_space(gpu)
    for key in ('free_slices', 'placeable', 'largest_placeable', 'stranded_slices', 'fragmentation'):
        facts[key] = figures[key]
    return facts


def declared_state(module, host, pod_devices):
    """(layout name, {GPU uuid: in layout or None}) against the declared layout file, if one is named and exists."""
    path = module.params['layout_file']
    if not path or not os.path.exists(path):
        return None, {}
    try:
        dummy, request = load_layout(path)
    except DeclaredLayoutError as exc:
        module.fail_json(msg=str(exc))
    request.pod_devices = pod_devices or []
    return request.name, in_layout_by_uuid(host, request)


def read_allocatable(module):
    """{GPU resource: sorted device ids} from the kubelet's GetAllocatableResources."""
    if module.params['pod_resources'] == 'off':
        module.fail_json(msg='kubelet_allocatable asks the kubelet, which pod_resources=off never does: set pod_resources '
                             'to auto or required')
    try:
        return allocatable_gpu_device_ids(module.params['pod_resources_socket'])
    except PodResourcesUnavailable as exc:
        module.fail_json(msg='kubelet_allocatable: the device ids the kubelet advertises cannot be read: %s' % exc)


def main_body(module):
    with nvml_session(module, exclusive=False) as backend:
        # Under the host lock: what pods hold and what the GPUs hold are read as one snapshot.
        pod_devices, pod_status = read_pod_resources(module)
        allocatable = read_allocatable(module) if module.params['kubelet_allocatable'] else None
        host = backend.read_host()
    layout, in_layout = declared_state(module, host, pod_devices)
    # Without pod-resources, the pods of running processes are still known from their cgroups.
    holders = host_allocations(host, pod_devices)
    selected = select_gpus(host.gpus, module.params['gpus'])
    facts = {
        'driver_version': host.driver_version,
        'nvml_version': host.nvml_version,
        'simulated': host.simulated,
        'pod_resources': pod_status,
        'layout': layout,
        'gpus': [dict(gpu_facts(gpu, holders.of(gpu.uuid)), in_layout=in_layout.get(gpu.uuid)) for gpu, dummy in selected],
    }
    if allocatable is not None:
        facts['kubelet_allocatable'] = allocatable
    if module.params['summary']:
        try:
            summary = host_summary(layout, facts['gpus'], 'this host')
        except MapInputError as exc:
            module.fail_json(msg='the summary of the GPUs cannot be made: %s' % exc)
        module.exit_json(changed=False, ansible_facts={'nvidia_mig_summary': cached_summary(summary, datetime.datetime.now(datetime.timezone.utc))})
    module.exit_json(changed=False, ansible_facts={'nvidia_mig': facts})


def main():
    argument_spec = dict(gpus=dict(type='list', elements='str', default=['all']), layout_file=dict(type='path', default=DEFAULT_LAYOUT_FILE),
                         kubelet_allocatable=dict(type='bool', default=False), summary=dict(type='bool', default=False))
    argument_spec.update(COMMON_ARGUMENT_SPEC)
    argument_spec.update(POD_RESOURCES_ARGUMENT_SPEC)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    run_module(module, main_body)


if __name__ == '__main__':
    main()

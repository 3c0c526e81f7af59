# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """Options and requirements shared by the NVML modules."""

    DOCUMENTATION = r'''
options:
  lock_timeout:
    description:
      - Seconds to wait for the host-wide lock held by another gpufleet.mig run on the same host.
    type: int
    default: 120
requirements:
  - nvidia-ml-py (imported as C(pynvml)) on the managed host
notes:
  - When the environment variable E(GPUFLEET_MIG_SIMULATOR) names a JSON state file, a simulated NVML
    library is loaded into C(pynvml) instead of C(libnvidia-ml.so.1); everything else runs as on real GPUs.
    See the collection's docs/simulator.md.
  - Everything is validated before the first NVML change; an error names the GPU and the cause.
'''

    # The GPU selector of the modules that act on chosen GPUs: gpufleet.mig.nvml.gpus
    GPUS = r'''
options:
  gpus:
    description:
      - GPUs to act on. Each selector is V(all), an index such as V(0), a UUID such as V(GPU-5d9c...),
        or a PCI device id in mig-parted form such as V(0x20B210DE).
      - A selector that matches no GPU is an error and nothing is changed.
    type: list
    elements: str
'''

    # Which pods hold the GPUs: gpufleet.mig.nvml.pod_resources
    POD_RESOURCES = r'''
options:
  pod_resources:
    description:
      - Which pods hold which GPU and MIG device, read from the kubelet's pod-resources API (needs C(grpcio) for the
        module's Python). An instance a pod holds is busy and never destroyed, with or without processes.
      - V(auto) reads it where the socket O(pod_resources_socket) exists, and fails, changing nothing, where it exists
        but cannot be read (C(grpcio) missing, permission denied, the kubelet not answering), as an existing socket
        means a Kubernetes node. Where there is no socket, it does what V(off) does.
      - V(required) fails wherever it cannot be read, a missing socket included.
      - V(off) never asks the kubelet. The pods of the GPU processes that run are still found through their
        C(/proc/<pid>/cgroup) (named C(uid:<pod uid>)); a pod that holds an instance with no process running is then
        unknown, and that instance counts as idle.
      - A device id of a GPU resource (C(nvidia.com/gpu), C(nvidia.com/mig-<profile>), either also with C(.shared) as
        time-slicing's C(renameByDefault) names them) that matches no GPU or MIG device of the host (UUID, index, or
        C(<gpu>:<mig device>) index, with or without a C(::<replica>) suffix) fails the module, since which instances
        pods hold is then unknown.
    type: str
    choices: [auto, required, 'off']
    default: auto
  pod_resources_socket:
    description: The kubelet's pod-resources socket.
    type: path
    default: /var/lib/kubelet/pod-resources/kubelet.sock
'''

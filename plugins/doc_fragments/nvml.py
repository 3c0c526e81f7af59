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

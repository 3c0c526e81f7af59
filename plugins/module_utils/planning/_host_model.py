# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""What a host's GPUs hold, read from the backend's data (_nvml_backend.read_gpu): the one copy of each such rule.

No NVML, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def instance_pids(gpu_instance):
    """The processes on one GPU instance: those of its compute instances (each MIG device), sorted, each once."""
    return sorted(set(p['pid'] for ci in gpu_instance.get('compute_instances') or [] for p in ci.get('processes') or []))


def gpu_processes(gpu):
    """(GPU instance id, pid) of every process on a GPU, in NVML's order: with MIG off NVML lists them on
    the GPU itself (instance id None), with MIG on on the MIG device of each compute instance."""
    places = [(None, p['pid']) for p in gpu.get('processes') or []]
    for gi in gpu.get('gpu_instances') or []:
        places.extend((gi['id'], p['pid']) for ci in gi.get('compute_instances') or [] for p in ci.get('processes') or [])
    return places


def gpu_pids(gpu):
    """Every process on a GPU (its own and those of its instances), sorted, each once."""
    return sorted(set(pid for dummy, pid in gpu_processes(gpu)))


def host_pids(host):
    """Every process on the host's GPUs, sorted, each once."""
    return sorted(set(pid for gpu in host['gpus'] for pid in gpu_pids(gpu)))

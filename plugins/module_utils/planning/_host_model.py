# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""What a host's GPUs hold: the processes on them (read from the backend's data, _nvml_backend.read_gpu) and
the pods that hold them (:class:`HostHolders`, built by _pod_allocations.allocations_of). One copy of each rule
that reads them. No NVML, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass, field
from typing import Dict, Tuple


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


@dataclass(frozen=True)
class GpuHolders:
    """The pods that hold one GPU ('namespace/pod', or 'uid:<pod uid>' where only a process's cgroup names it).

    ``gpu``: the pods given the whole GPU; ``instances``: GPU instance id -> the pods given one of its MIG
    devices; ``index_pods``: the pods among them that hold a MIG device by index id ('<gpu>:<mig device>'),
    which names another instance once the GPU's MIG devices change (_pod_resources.index_id_refusal).
    A pod holds what it was given whether or not a process of it runs now.
    """

    gpu: Tuple[str, ...] = ()
    instances: Dict[int, Tuple[str, ...]] = field(default_factory=dict)
    index_pods: Tuple[str, ...] = ()

    def of_instance(self, gpu_instance_id):
        """The pods that hold GPU instance ``gpu_instance_id`` (none: an empty tuple)."""
        return self.instances.get(gpu_instance_id, ())

    def pods(self):
        """Every pod that holds the GPU or one of its instances, sorted."""
        pods = set(self.gpu)
        for names in self.instances.values():
            pods.update(names)
        return sorted(pods)

    def as_dict(self):
        return {'instances': dict((gi_id, list(pods)) for gi_id, pods in self.instances.items()), 'gpu': list(self.gpu),
                'index_pods': list(self.index_pods)}


NOBODY = GpuHolders()


@dataclass(frozen=True)
class HostHolders:
    """The pods that hold each GPU of a host, by GPU uuid (GPUs no pod holds are left out)."""

    gpus: Dict[str, GpuHolders] = field(default_factory=dict)

    def of(self, gpu_uuid):
        """The holders of one GPU (:data:`NOBODY` where no pod holds it)."""
        return self.gpus.get(gpu_uuid, NOBODY)

    def as_dict(self):
        return dict((uuid, holders.as_dict()) for uuid, holders in self.gpus.items())

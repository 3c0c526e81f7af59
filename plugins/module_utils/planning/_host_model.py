# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The one model of a host's GPUs: what NVML reports (:class:`Host`, :class:`Gpu`, :class:`GpuInstance`,
:class:`ComputeInstance`, :class:`Placement`, :class:`Process`), built once by _nvml_backend.read_host, and which
pods hold what (:class:`HostHolders`, built by _pod_allocations.allocations_of). Every rule that reads a host
takes these types; module results and facts stay plain data (``as_dict``), and ``from_dict`` reads that data
back (facts on the controller, the tests' hand-written GPUs). No NVML, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

ENABLED = 'enabled'
DISABLED = 'disabled'


@dataclass(frozen=True)
class Placement:
    """Where an instance sits: its first slice and how many it spans (NVML's placement struct)."""

    start: int
    size: int

    @classmethod
    def from_dict(cls, data):
        return cls(data['start'], data['size'])

    def as_dict(self):
        return {'start': self.start, 'size': self.size}


@dataclass(frozen=True)
class Process:
    """A process NVML lists on a GPU or a MIG device."""

    pid: int
    used_memory_mib: int = 0

    @classmethod
    def from_dict(cls, data):
        return cls(data['pid'], data.get('used_memory_mib') or 0)

    def as_dict(self):
        return {'pid': self.pid, 'used_memory_mib': self.used_memory_mib}


def _processes(items):
    return tuple(Process.from_dict(p) for p in items or ())


@dataclass(frozen=True)
class ComputeInstance:
    """One compute instance; ``uuid`` and ``mig_index`` name its MIG device (the one workloads see)."""

    id: int
    profile: str
    placement: Placement
    profile_id: Optional[int] = None
    uuid: Optional[str] = None
    mig_index: Optional[int] = None
    processes: Tuple[Process, ...] = ()

    @classmethod
    def from_dict(cls, data):
        return cls(data['id'], data['profile'], Placement.from_dict(data['placement']), data.get('profile_id'),
                   data.get('uuid'), data.get('mig_index'), _processes(data.get('processes')))

    def as_dict(self):
        return {'id': self.id, 'profile': self.profile, 'profile_id': self.profile_id, 'placement': self.placement.as_dict(),
                'uuid': self.uuid, 'mig_index': self.mig_index, 'processes': [p.as_dict() for p in self.processes]}


@dataclass(frozen=True)
class GpuInstance:
    """One GPU instance and the compute instances inside it (sorted by start)."""

    id: int
    profile: str
    placement: Placement
    profile_id: Optional[int] = None
    compute_instances: Tuple[ComputeInstance, ...] = ()

    @classmethod
    def from_dict(cls, data):
        return cls(data['id'], data['profile'], Placement.from_dict(data['placement']), data.get('profile_id'),
                   tuple(ComputeInstance.from_dict(ci) for ci in data.get('compute_instances') or ()))

    @property
    def start(self):
        return self.placement.start

    @property
    def busy(self):
        """A process runs on one of its MIG devices (who holds it is :class:`GpuHolders`' to say)."""
        return any(ci.processes for ci in self.compute_instances)

    def pids(self):
        """The processes on the instance: those of its compute instances, sorted, each once."""
        return sorted(set(p.pid for ci in self.compute_instances for p in ci.processes))

    def mig_uuids(self):
        """The UUIDs of its MIG devices, as workloads know them (compute instances without a device left out)."""
        return [ci.uuid for ci in self.compute_instances if ci.uuid]

    def compute_profiles(self):
        """The profiles of its compute instances, sorted: with its own profile, what a layout asks for."""
        return tuple(sorted(ci.profile for ci in self.compute_instances))

    def as_dict(self):
        return {'id': self.id, 'profile': self.profile, 'profile_id': self.profile_id, 'placement': self.placement.as_dict(),
                'compute_instances': [ci.as_dict() for ci in self.compute_instances], 'busy': self.busy}


@dataclass(frozen=True)
class MigMode:
    """MIG mode now and after the next GPU reset ('enabled' or 'disabled')."""

    current: str = DISABLED
    pending: str = DISABLED

    @classmethod
    def from_dict(cls, data):
        return cls(data.get('current', DISABLED), data.get('pending', DISABLED))

    @property
    def enabled(self):
        return self.current == ENABLED

    def is_steady(self, wanted):
        """Mode ``wanted`` now and after a reset."""
        return self.current == wanted and self.pending == wanted

    def as_dict(self):
        return {'current': self.current, 'pending': self.pending}


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML describes it.

    ``profiles`` is NVML's description of the GPU instance profiles, as plain data (the input of
    _mig_geometry.Catalog, which types it): NVML describes them only while MIG is enabled
    (``profiles_known``). ``processes`` are those NVML lists on the GPU itself (MIG off); with MIG on they
    are on the compute instances. ``placements_without_mig``: with MIG off, the placements each profile id
    answers (None where not read). ``profiles_without_mig``: with MIG off, the profiles the driver describes all
    the same, as ``profiles`` (None where it describes none, as nvml.h says; driver 580.159.04 did on an H200).
    """

    index: int
    uuid: Optional[str] = None
    name: str = ''
    mig_mode: MigMode = MigMode()
    mig_capable: bool = True
    reset_required: bool = False
    gpu_instances: Tuple[GpuInstance, ...] = ()
    processes: Tuple[Process, ...] = ()
    # Plain data, left out of the hash (a Gpu can still key a dict) and copied by as_dict (facts cannot change it).
    profiles: List[dict] = field(default_factory=list, hash=False)
    profiles_known: bool = False
    unsupported_profiles: List[str] = field(default_factory=list, hash=False)
    placements_without_mig: Optional[List[dict]] = field(default=None, hash=False)
    profiles_without_mig: Optional[List[dict]] = field(default=None, hash=False)
    pci_device_id: Optional[str] = None
    pci_subsystem_id: Optional[str] = None
    pci_bus_id: Optional[str] = None
    architecture: str = 'unknown'
    memory_total_mib: int = 0
    minor_number: Optional[int] = None

    @classmethod
    def from_dict(cls, data):
        """The GPU of plain data (facts, a test's GPU); what it leaves out takes the defaults, and without
        ``profiles_known`` the profiles are known where it lists some."""
        return cls(
            index=data.get('index'), uuid=data.get('uuid'), name=data.get('name', ''),
            mig_mode=MigMode.from_dict(data.get('mig_mode') or {}), mig_capable=data.get('mig_capable', True),
            reset_required=data.get('reset_required', False),
            gpu_instances=tuple(GpuInstance.from_dict(gi) for gi in data.get('gpu_instances') or ()),
            processes=_processes(data.get('processes')), profiles=list(data.get('profiles') or []),
            profiles_known=data.get('profiles_known', bool(data.get('profiles'))),
            unsupported_profiles=list(data.get('unsupported_profiles') or []),
            placements_without_mig=data.get('placements_without_mig'), profiles_without_mig=data.get('profiles_without_mig'),
            pci_device_id=data.get('pci_device_id'),
            pci_subsystem_id=data.get('pci_subsystem_id'), pci_bus_id=data.get('pci_bus_id'),
            architecture=data.get('architecture', 'unknown'), memory_total_mib=data.get('memory_total_mib', 0),
            minor_number=data.get('minor_number'))

    @property
    def busy(self):
        """A process runs on the GPU or on one of its instances."""
        return bool(self.processes) or any(gi.busy for gi in self.gpu_instances)

    def process_places(self):
        """(GPU instance id, pid) of every process, in NVML's order: with MIG off NVML lists them on the GPU
        itself (instance id None), with MIG on on the MIG device of each compute instance."""
        places = [(None, p.pid) for p in self.processes]
        for gi in self.gpu_instances:
            places.extend((gi.id, p.pid) for ci in gi.compute_instances for p in ci.processes)
        return places

    def pids(self):
        """Every process on the GPU (its own and those of its instances), sorted, each once."""
        return sorted(set(pid for dummy, pid in self.process_places()))

    def as_dict(self):
        data = {
            'index': self.index, 'uuid': self.uuid, 'name': self.name, 'pci_device_id': self.pci_device_id,
            'pci_subsystem_id': self.pci_subsystem_id, 'pci_bus_id': self.pci_bus_id, 'architecture': self.architecture,
            'memory_total_mib': self.memory_total_mib, 'minor_number': self.minor_number, 'mig_capable': self.mig_capable,
            'mig_mode': self.mig_mode.as_dict(), 'profiles': copy.deepcopy(self.profiles), 'profiles_known': self.profiles_known,
            'unsupported_profiles': list(self.unsupported_profiles),
            'gpu_instances': [gi.as_dict() for gi in self.gpu_instances],
            'processes': [p.as_dict() for p in self.processes], 'reset_required': self.reset_required,
        }
        if self.placements_without_mig is not None:
            data['placements_without_mig'] = copy.deepcopy(self.placements_without_mig)
        if self.profiles_without_mig is not None:
            data['profiles_without_mig'] = copy.deepcopy(self.profiles_without_mig)
        return data


@dataclass(frozen=True)
class Host:
    """A host's driver and its GPUs in NVML's index order."""

    gpus: Tuple[Gpu, ...] = ()
    driver_version: str = ''
    nvml_version: str = ''
    simulated: bool = False

    @classmethod
    def from_dict(cls, data):
        return cls(tuple(Gpu.from_dict(g) for g in data.get('gpus') or ()), data.get('driver_version', ''),
                   data.get('nvml_version', ''), data.get('simulated', False))

    def pids(self):
        """Every process on the host's GPUs, sorted, each once."""
        return sorted(set(pid for gpu in self.gpus for pid in gpu.pids()))

    def as_dict(self):
        return {'driver_version': self.driver_version, 'nvml_version': self.nvml_version, 'simulated': self.simulated,
                'gpus': [gpu.as_dict() for gpu in self.gpus]}


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

    def pods(self):
        """Every pod that holds any GPU or instance of the host, sorted: what a drain evicts."""
        return sorted(set(pod for holders in self.gpus.values() for pod in holders.pods()))

    def as_dict(self):
        return dict((uuid, holders.as_dict()) for uuid, holders in self.gpus.items())

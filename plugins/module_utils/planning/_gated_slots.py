# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The instances as the gated queue (planning/_gated_queue) sees them: a :class:`Slot` per instance, on the GPUs of the
nodes' annotations or nvidia_mig facts (:func:`read_gpus`).

Pure Python: no NVML, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass
from typing import Optional

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_placement import _catalog
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Occupancy

# An instance NVML lists processes on that no pod holds: never idle.
PROCESS_HOLDER = '(processes)'


@dataclass(frozen=True)
class Slot:
    """One instance as the queue sees it: ``id`` None until its create ran; ``holder`` the pod (by device id) or
    :data:`PROCESS_HOLDER`; ``reserved_for`` the pod the queue gave it that is not bound yet; ``idle_since`` when a pod
    left it (None: idle since before the queue watched, which the release rule leaves alone; a reshape may use it)."""

    node: str
    gpu: int
    profile: str
    start: int
    id: Optional[int] = None
    holder: Optional[str] = None
    reserved_for: Optional[str] = None
    idle_since: Optional[float] = None

    @property
    def idle(self):
        return self.holder is None and self.reserved_for is None


class _Gpu(object):
    __slots__ = ('node', 'index', 'catalog', 'slots')

    def __init__(self, node, index, catalog, slots):
        self.node, self.index, self.catalog, self.slots = node, index, catalog, list(slots)

    def occupancy(self, without=()):
        return Occupancy.of(self.catalog, [(s.profile, s.start) for s in self.slots if s not in without])

    def first_start(self, profile, occupancy):
        for start in profile.starts:
            if occupancy.can_place(profile, start):
                return start
        return None

    def taken_slices(self):
        return sum(self.catalog.get(s.profile).memory_slices for s in self.slots if not s.idle)


def read_gpus(node, gpus):
    """The slots of one node's GPUs as the annotation (_demand_fast.gpus_annotation) or nvidia_mig facts give them."""
    read = []
    for gpu in sorted(gpus or [], key=lambda g: g.get('index', 0)):
        if not isinstance(gpu, dict) or 'index' not in gpu or not gpu.get('profiles') or gpu.get('allocated_to'):
            continue   # no MIG, or a pod holds the whole GPU
        slots = []
        for gi in gpu.get('gpu_instances') or []:
            try:
                holders = gi.get('allocated_to') or []
                pids = [p for ci in gi.get('compute_instances') or [] for p in ci.get('processes') or []]
                slots.append(Slot(node, gpu['index'], gi['profile'], gi['placement']['start'], gi.get('id'),
                                  sorted(holders)[0] if holders else (PROCESS_HOLDER if pids else None)))
            except (KeyError, TypeError) as exc:
                raise DemandPlanError('node %s GPU %s: an instance without %s' % (node, gpu['index'], exc))
        read.append(_Gpu(node, gpu['index'], _catalog(gpu['profiles']), slots))
    return read

# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Whether the kubelet advertises the MIG devices the GPUs hold after a change, decided as values.

Pure Python (no Ansible, no Kubernetes client): the role reads the node's allocatable and the kubelet's
GetAllocatableResources and hands them in through the gpufleet.mig.mig_handover_* filters.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._node_handover import HandoverError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import (
    is_gpu_resource,
    is_shared_resource,
    renamed_gpu_id,
    strip_replica,
)


def _base_resource(name):
    return name[:-len('.shared')] if is_shared_resource(name) else name


class Advertisement(object):
    """Whether the kubelet advertises exactly the MIG devices the GPUs now hold, compared as id sets.

    ``expected`` is the apply's ``expected_device_ids`` ({resource: {'uuid': [...], 'index': [...]}});
    ``advertised`` is what the kubelet's GetAllocatableResources reports ({resource: [ids]}, from
    nvidia_mig_facts kubelet_allocatable). Counts are not enough: after 7x1g -> 4x1g a plugin that
    still advertises destroyed UUIDs passes a ``>=`` count. Only GPU resources count; a ``.shared``
    resource (time-slicing renamed) counts as its base resource and its replicas (``<id>::<n>``) as
    the id they share. A resource under another name (the device_plugin role's ``rename``:
    ``nvidia.com/small-gpu``) counts by id, as holding does (_pod_allocations): its ids that the GPUs hold count
    for the resource that expects them, its other GPU or MIG ids (renamed_gpu_id) are stale under its own name.
    """

    def __init__(self, expected, advertised, strategy='uuid'):
        if strategy not in ('uuid', 'index'):
            raise HandoverError("mig_layout_k8s_device_id_strategy must be uuid or index, not %r" % (strategy,))
        want = {}
        for resource, ids in (expected or {}).items():
            if is_gpu_resource(resource):
                want.setdefault(_base_resource(resource), set()).update((ids or {}).get(strategy) or [])
        expected_by_id = dict((device_id, resource) for resource, ids in want.items() for device_id in ids)
        have = {}
        for resource, ids in (advertised or {}).items():
            if is_gpu_resource(resource):
                have.setdefault(_base_resource(resource), set()).update(strip_replica(i) for i in ids or [])
                continue
            for device_id in ids or []:
                if renamed_gpu_id(device_id):
                    bare = strip_replica(device_id)
                    have.setdefault(expected_by_id.get(bare, resource), set()).add(bare)
        self.missing = dict((r, sorted(want[r] - have.get(r, set()))) for r in sorted(want) if want[r] - have.get(r, set()))
        self.stale = dict((r, sorted(have[r] - want.get(r, set()))) for r in sorted(have) if have[r] - want.get(r, set()))

    @property
    def matches(self):
        return not self.missing and not self.stale

    def problem(self):
        """What the kubelet does not advertise yet, and what it still advertises that is gone, or None."""
        if self.matches:
            return None
        parts = []
        if self.missing:
            parts.append('not advertised yet: %s' % '; '.join('%s %s' % (r, ', '.join(i)) for r, i in self.missing.items()))
        if self.stale:
            parts.append('still advertised although gone: %s' % '; '.join('%s %s' % (r, ', '.join(i)) for r, i in self.stale.items()))
        return ' and '.join(parts)

    def as_dict(self):
        return {'matches': self.matches, 'missing': self.missing, 'stale': self.stale, 'problem': self.problem()}


def allocatable_short(expected_counts, allocatable):
    """The GPU resources the Node's allocatable advertises fewer of than ``expected_counts``, as messages.

    Where the host cannot say which device ids it expects (no expected_device_ids), counts are all the
    role can compare: at least what the GPUs hold (time-slicing advertises a multiple). A ``.shared``
    resource counts for its base resource. Weaker than Advertisement: a plugin still advertising
    destroyed instances passes when the counts are high enough.
    """
    have = {}
    for resource, value in (allocatable or {}).items():
        if is_gpu_resource(resource):
            base = _base_resource(resource)
            have[base] = have.get(base, 0) + int(value)
    return ['%s: %d advertised, %d held' % (r, have.get(r, 0), int(n)) for r, n in sorted((expected_counts or {}).items())
            if int(n) > 0 and have.get(r, 0) < int(n)]

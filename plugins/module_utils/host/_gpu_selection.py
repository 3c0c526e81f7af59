# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""GPU selectors shared by every module: ``all``, an index, a UUID or a PCI device id."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError

_PCI_DEVICE_ID_RE = re.compile(r'^0x[0-9a-fA-F]{8}$')


class SelectionError(GpufleetError, ValueError):
    """A selector that is malformed or matches no GPU."""


def select_gpus(gpus, selectors):
    """Resolve selectors against the host's GPUs.

    Returns ``[(gpu, explicit)]`` in index order; ``explicit`` is False for GPUs matched
    only through ``all`` (modules skip non-MIG-capable ones instead of failing).
    """
    if not selectors:
        raise SelectionError('gpus must name at least one selector (all, an index, a UUID or a PCI device id)')
    chosen = {}
    for raw in selectors:
        selector = str(raw).strip()
        if selector.lower() == 'all':
            matched = [(gpu, False) for gpu in gpus]
        elif selector.isdigit():
            matched = [(gpu, True) for gpu in gpus if gpu.index == int(selector)]
        elif _PCI_DEVICE_ID_RE.match(selector):
            matched = [(gpu, True) for gpu in gpus if (gpu.pci_device_id or '').lower() == selector.lower()]
        elif selector.upper().startswith('GPU-'):
            matched = [(gpu, True) for gpu in gpus if (gpu.uuid or '').lower() == selector.lower()]
        else:
            raise SelectionError("invalid GPU selector %r: use 'all', an index such as 0, a UUID such as GPU-..., "
                                 "or a PCI device id such as 0x20B210DE" % (raw,))
        if not matched:
            available = ', '.join('%d (%s, %s)' % (g.index, g.uuid, g.pci_device_id) for g in gpus) or 'none'
            raise SelectionError('GPU selector %r matches no GPU on this host (GPUs: %s)' % (raw, available))
        for gpu, explicit in matched:
            chosen[gpu.index] = (gpu, explicit or chosen.get(gpu.index, (None, False))[1])
    return [chosen[index] for index in sorted(chosen)]


def select_mig_gpus(gpus, selectors):
    """The MIG-capable GPUs the selectors name, in index order, and the others matched only through ``all``.

    Returns ``(selected, skipped)``; ``skipped`` entries are ``{index, name, reason}`` (the modules' ``skipped_gpus``).
    A GPU without MIG named explicitly (index, UUID or PCI device id) is an error.
    """
    selected = []
    skipped = []
    for gpu, explicit in select_gpus(gpus, selectors):
        if gpu.mig_capable:
            selected.append(gpu)
        elif explicit:
            raise SelectionError('GPU %d (%s) is not MIG-capable' % (gpu.index, gpu.name))
        else:
            skipped.append({'index': gpu.index, 'name': gpu.name, 'reason': 'not MIG-capable'})
    return selected, skipped

# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The before/after text a module returns as Ansible's ``diff``, recorded line by line as the module reports each GPU.

Like community.docker's DifferenceTracker: the module adds what it found and what it leaves, and takes the
diff from the recorder; no module joins lines by hand. No Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def layout_lines(gpu_index, layout):
    """Human-readable layout, one line per GPU instance."""
    lines = []
    for entry in layout:
        cis = ','.join('%s@%d' % (ci['profile'], ci['placement']['start']) for ci in entry['compute_instances'])
        busy = ' busy pids=%s' % entry['pids'] if entry.get('busy') else ''
        lines.append('GPU %s: %s@%d [%s]%s' % (gpu_index, entry['profile'], entry['placement']['start'], cis, busy))
    if not layout:
        lines.append('GPU %s: (no instances)' % gpu_index)
    return lines


def mode_line(gpu_index, mode, label='MIG '):
    """One GPU's MIG mode, current and pending (``label`` before them: '' where the diff holds modes only)."""
    return 'GPU %d: %scurrent=%s pending=%s' % (gpu_index, label, mode['current'], mode['pending'])


class DiffRecorder(object):
    """Lines before and after, in the order they are added; :meth:`as_dict` is the module's ``diff``."""

    def __init__(self):
        self.before = []
        self.after = []

    def add(self, before, after):
        """Lines (lists of str) of one thing before and after."""
        self.before.extend(before)
        self.after.extend(after)

    def mode(self, gpu_index, before, after, label='MIG '):
        """A GPU's MIG mode ({current, pending}) before and after."""
        self.add([mode_line(gpu_index, before, label)], [mode_line(gpu_index, after, label)])

    def layout(self, gpu_index, before, after, note=None):
        """A GPU's instances (_mig_planner.layout_of entries) before and after; ``after`` None: not planned yet,
        for the reason ``note``."""
        self.add(layout_lines(gpu_index, before),
                 layout_lines(gpu_index, after) if after is not None else ['GPU %d: (%s)' % (gpu_index, note)])

    def as_dict(self):
        return {'before': ''.join(line + '\n' for line in self.before), 'after': ''.join(line + '\n' for line in self.after)}


def layout_run_diff(before, after):
    """nvidia_mig_layout's diff: each GPU's mode and instances before, and as the apply left them (planned, without an
    apply). ``before``, ``after``: _layout_converge's HostDecision before the change, and after it or None."""
    diff = DiffRecorder()
    final = dict((g.index, g) for g in (after.gpus if after else []))
    for gpu in before.gpus:
        planned = gpu.as_dict()
        end = final.get(gpu.index)
        if end is not None:
            after_mode, after_layout = end.gpu.mig_mode, end.as_dict()['before']
        else:
            after_mode, after_layout = gpu.mode.after, planned['after']
        diff.mode(gpu.index, gpu.gpu.mig_mode.as_dict(), after_mode.as_dict())
        diff.layout(gpu.index, planned['before'], after_layout, note=planned['note'])
    return diff.as_dict()

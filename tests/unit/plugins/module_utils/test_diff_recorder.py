# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one diff recorder of the modules: lines in the order added, a layout's lines, a deferred GPU's note."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils._diff_recorder import DiffRecorder, layout_lines, mode_line


def entry(profile, start, cis, pids=None):
    return {'profile': profile, 'placement': {'start': start, 'size': 1}, 'busy': bool(pids), 'pids': pids or [],
            'compute_instances': [{'profile': name, 'placement': {'start': at}} for name, at in cis]}


def test_layout_lines_one_per_instance_with_its_compute_instances_and_busy_pids():
    layout = [entry('2g.20gb', 0, [('1c.2g.20gb', 0), ('1c.2g.20gb', 1)]), entry('1g.10gb', 6, [('1g.10gb', 0)], pids=[7, 9])]
    assert layout_lines(3, layout) == ['GPU 3: 2g.20gb@0 [1c.2g.20gb@0,1c.2g.20gb@1]', 'GPU 3: 1g.10gb@6 [1g.10gb@0] busy pids=[7, 9]']
    assert layout_lines(3, []) == ['GPU 3: (no instances)']


def test_mode_line_with_and_without_its_label():
    mode = {'current': 'enabled', 'pending': 'disabled'}
    assert mode_line(1, mode) == 'GPU 1: MIG current=enabled pending=disabled'
    assert mode_line(1, mode, label='') == 'GPU 1: current=enabled pending=disabled'


def test_recorder_keeps_the_order_of_what_was_added_and_ends_each_line():
    on = {'current': 'enabled', 'pending': 'enabled'}
    off = {'current': 'disabled', 'pending': 'disabled'}
    diff = DiffRecorder()
    assert diff.as_dict() == {'before': '', 'after': ''}
    diff.mode(0, off, on)
    diff.layout(0, [], None, note='planned once MIG is enabled')
    diff.mode(1, on, on)
    diff.layout(1, [entry('1g.10gb', 0, [('1g.10gb', 0)])], [])
    diff.add(['x'], ['y', 'z'])
    assert diff.as_dict() == {
        'before': 'GPU 0: MIG current=disabled pending=disabled\nGPU 0: (no instances)\n'
                  'GPU 1: MIG current=enabled pending=enabled\nGPU 1: 1g.10gb@0 [1g.10gb@0]\nx\n',
        'after': 'GPU 0: MIG current=enabled pending=enabled\nGPU 0: (planned once MIG is enabled)\n'
                 'GPU 1: MIG current=enabled pending=enabled\nGPU 1: (no instances)\ny\nz\n',
    }

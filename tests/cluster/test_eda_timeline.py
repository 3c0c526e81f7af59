# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""eda_timeline.py without a cluster: the points and segments of a pod's creation to Running, read from the
three logs of the EDA check (molecule/cluster/tasks/eda_demand.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import eda_timeline  # noqa: E402  (after the path: it lives beside this file)

BASE = time.mktime((2026, 12, 4, 3, 0, 0, 0, 0, -1))


def stamp(seconds):
    """A Python logging asctime (local time) ``seconds`` after BASE."""
    whole = int(seconds)
    return time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(BASE + whole)) + ',%03d' % round((seconds - whole) * 1000)


RULEBOOK = '\n'.join([
    stamp(-5) + ' - root - INFO - mig_pending_pods: 1 pod(s) wait for MIG slices, 1 new',   # an earlier burst
    stamp(3.5) + ' - mig_pending_pods - INFO - mig_pending_pods: 2 pod(s) wait for MIG slices, 2 new',
    'a line without a stamp',
])
ANSIBLE = '\n'.join([
    stamp(5.0) + ' p=1 u=root n=ansible | PLAY [Plan the MIG instances the pending pods need] ****',
    stamp(6.0) + ' p=1 u=root n=ansible | TASK [Plan the fleet] ****',
    stamp(12.0) + ' p=1 u=root n=ansible | TASK [gpufleet.mig.mig_layout : Hand the Kubernetes node over] ****',
    stamp(15.0) + ' p=1 u=root n=ansible | TASK [gpufleet.mig.mig_layout : Apply the layout (the module verifies the GPUs afterwards)] ****',
    stamp(17.5) + ' p=1 u=root n=ansible | ok: [sim-a100-01]',
    stamp(18.0) + ' p=1 u=root n=ansible | TASK [gpufleet.mig.mig_layout : Stop when the host was lost] ****',
    stamp(30.0) + ' p=1 u=root n=ansible | PLAY RECAP ****',
])
WATCH = [
    {'kind': 'ready'},
    {'kind': 'node', 'at': BASE - 1, 'allocatable': {'nvidia.com/mig-1g.20gb': 1}},   # before the pod: not it
    {'kind': 'node', 'at': BASE + 14, 'allocatable': {'nvidia.com/mig-1g.10gb': 2}},
    {'kind': 'node', 'at': BASE + 21, 'allocatable': {'nvidia.com/mig-1g.10gb': 2, 'nvidia.com/mig-1g.20gb': 1}},
    {'kind': 'pod', 'at': BASE + 0.2, 'name': 'small', 'phase': 'Pending', 'running': False, 'node': None},
    {'kind': 'pod', 'at': BASE + 22, 'name': 'other', 'phase': 'Running', 'running': True, 'node': 'gpu-node'},
    {'kind': 'pod', 'at': BASE + 22.5, 'name': 'small', 'phase': 'Pending', 'running': False, 'node': 'gpu-node'},
    {'kind': 'pod', 'at': BASE + 24, 'name': 'small', 'phase': 'Running', 'running': False, 'node': 'gpu-node'},
    {'kind': 'pod', 'at': BASE + 24.4, 'name': 'small', 'phase': 'Running', 'running': True, 'node': 'gpu-node'},
]


def test_points_and_segments_from_the_three_logs():
    result = eda_timeline.timeline(BASE, RULEBOOK, ANSIBLE, WATCH, 'small', 'nvidia.com/mig-1g.20gb')
    assert result['points'] == {'event': 3.5, 'playbook_start': 5.0, 'handover_start': 12.0, 'applied': 18.0,
                                'advertised': 21.0, 'bound': 22.5, 'running': 24.4}
    assert result['segments'] == [
        {'segment': 'debounce', 'seconds': 3.5}, {'segment': 'rulebook to playbook', 'seconds': 1.5},
        {'segment': 'planning', 'seconds': 7.0}, {'segment': 'hand-over and apply', 'seconds': 6.0},
        {'segment': 'device plugin', 'seconds': 3.0}, {'segment': 'scheduling', 'seconds': 1.5},
        {'segment': 'container start', 'seconds': 1.9}]
    assert result['total'] == 24.4 and result['playbook_end'] == 30.0
    # The segments add up to the total.
    assert round(sum(s['seconds'] for s in result['segments']), 1) == result['total']


def test_a_point_not_reached_is_none_and_the_next_segment_counts_from_the_last_one_reached():
    result = eda_timeline.timeline(BASE, RULEBOOK, '', WATCH, 'small', 'nvidia.com/mig-1g.20gb')
    assert result['points']['playbook_start'] is None and result['playbook_end'] is None
    assert result['segments'][1] == {'segment': 'rulebook to playbook', 'seconds': None}
    assert result['segments'][4] == {'segment': 'device plugin', 'seconds': 17.5}
    nothing = eda_timeline.timeline(BASE, '', '', [], 'small', 'nvidia.com/mig-1g.20gb')
    assert nothing['total'] is None and set(nothing['points'].values()) == {None}


def test_a_burst_split_in_two_runs_is_timed_on_the_run_that_changed_the_node():
    # The first event told only the pod that cannot be served: its run changed nothing; the pod's own run came next.
    rulebook = RULEBOOK.replace(stamp(3.5) + ' - mig_pending_pods', stamp(1.5) + ' - mig_pending_pods') + '\n' + \
        stamp(3.5) + ' - mig_pending_pods - INFO - mig_pending_pods: 2 pod(s) wait for MIG slices, 1 new'
    ansible = '\n'.join([
        stamp(2.0) + ' p=1 u=root n=ansible INFO| PLAY [Plan the MIG instances the pending pods need] ****',
        stamp(4.0) + ' p=1 u=root n=ansible INFO| PLAY RECAP ****',
    ]) + '\n' + ANSIBLE
    result = eda_timeline.timeline(BASE, rulebook, ansible, WATCH, 'small', 'nvidia.com/mig-1g.20gb')
    assert result['points']['event'] == 3.5 and result['points']['playbook_start'] == 5.0
    assert result['playbook_end'] == 30.0


FAST_RULEBOOK = '\n'.join([
    stamp(1.8) + ' - mig_pending_pods - INFO - mig_pending_pods: fast create fast-ab-1 on host sim (node n): '
    '{"0": {"1g.20gb": 1}} for mig-demand/fast-1',
    stamp(31.5) + ' - mig_pending_pods - INFO - mig_pending_pods: fast create fast-ab-2 on host sim (node n): '
    '{"0": {"1g.20gb": 1}} for mig-demand/fast-10, mig-demand/fast-2',
])
FAST_ANSIBLE = '\n'.join([
    stamp(3.0) + ' p=1 u=root n=ansible | PLAY [Create the instances the waiting pods need, only in free slices] ****',
    stamp(3.5) + ' p=1 u=root n=ansible | TASK [Take the fleet lease (refused when a planning run keeps it)] ****',
    stamp(4.0) + ' p=1 u=root n=ansible | TASK [Create the instances in free slices (nvidia_mig_layout, create_only)] ****',
    stamp(5.5) + " p=1 u=root n=ansible | TASK [Make the node's device plugin enumerate the new instances] ****",
    stamp(6.0) + ' p=1 u=root n=ansible | TASK [Note the outcome] ****',
    stamp(8.0) + ' p=1 u=root n=ansible | PLAY RECAP ****',
    stamp(33.0) + ' p=1 u=root n=ansible | PLAY [Create the instances the waiting pods need, only in free slices] ****',
    stamp(34.0) + ' p=1 u=root n=ansible | TASK [Create the instances in free slices (nvidia_mig_layout, create_only)] ****',
    stamp(35.0) + " p=1 u=root n=ansible | TASK [Make the node's device plugin enumerate the new instances] ****",
    stamp(35.4) + ' p=1 u=root n=ansible | TASK [Note the outcome] ****',
])
FAST_WATCH = [
    {'kind': 'node', 'at': BASE + 2, 'allocatable': {'nvidia.com/mig-1g.20gb': 0}},
    {'kind': 'node', 'at': BASE + 11, 'allocatable': {'nvidia.com/mig-1g.20gb': 1}},
    {'kind': 'pod', 'at': BASE + 11.2, 'name': 'fast-1', 'phase': 'Pending', 'running': False, 'node': 'n'},
    {'kind': 'pod', 'at': BASE + 12.0, 'name': 'fast-1', 'phase': 'Running', 'running': True, 'node': 'n'},
    {'kind': 'node', 'at': BASE + 38, 'allocatable': {'nvidia.com/mig-1g.20gb': 2}},
    {'kind': 'pod', 'at': BASE + 38.1, 'name': 'fast-2', 'phase': 'Pending', 'running': False, 'node': 'n'},
    {'kind': 'pod', 'at': BASE + 39.1, 'name': 'fast-2', 'phase': 'Running', 'running': True, 'node': 'n'},
]


def test_the_fast_path_runs_and_their_medians():
    result = eda_timeline.fast_runs(FAST_RULEBOOK, FAST_ANSIBLE, FAST_WATCH, 'nvidia.com/mig-1g.20gb',
                                    [('fast-1', BASE, 1), ('fast-2', BASE + 30, 2)])
    first, second = result['runs']
    assert first['points'] == {'event': 1.8, 'playbook_start': 3.0, 'created': 5.5, 'signalled': 6.0,
                               'advertised': 11.0, 'bound': 11.2, 'running': 12.0}
    assert first['total'] == 12.0 and round(sum(s['seconds'] for s in first['segments']), 1) == 12.0
    # The second run: its own event (a pod named fast-10 is not fast-2), its own playbook, the second instance.
    assert second['points'] == {'event': 1.5, 'playbook_start': 3.0, 'created': 5.0, 'signalled': 5.4,
                                'advertised': 8.0, 'bound': 8.1, 'running': 9.1}
    summary = dict((s['segment'], s) for s in result['summary'])
    assert summary['total'] == {'segment': 'total', 'median': 10.55, 'min': 9.1, 'max': 12.0, 'runs': [12.0, 9.1]}
    assert summary['kubelet node status']['runs'] == [5.0, 2.6]
    assert eda_timeline.median([3.0, None, 1.0, 2.0]) == 2.0 and eda_timeline.median([None]) is None

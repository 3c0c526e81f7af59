# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the time from a pod's creation to Running went, in the cluster scenario's EDA check
(molecule/cluster/tasks/eda_demand.yml): from three logs that each carry the wall clock.

  eda_timeline.py CREATED_AT RULEBOOK_LOG ANSIBLE_LOG WATCH_FILE POD RESOURCE
  eda_timeline.py --fast RULEBOOK_LOG ANSIBLE_LOG WATCH_FILE RESOURCE POD=CREATED_AT=COUNT...

--fast: the create-only fast path (playbooks/mig_demand_create.yml), one run per POD (created at CREATED_AT, the
node advertising COUNT of RESOURCE once its instance is there), and the median of each segment over the runs:
debounce (the scheduler marks the pod unschedulable, the source's fast quiet period and decision: its line
"fast create <run> ... for <pod>"), rulebook to playbook, lease and create (the fleet lease, nvidia_mig_layout with
create_only), device plugin signal (the SIGHUP), kubelet node status (the plugin's enumeration, the kubelet's
ListAndWatch update and its next node status update: nodeStatusUpdateFrequency), scheduling, container start.

CREATED_AT: the wall clock (seconds since the epoch) just before the pod was created. RULEBOOK_LOG:
ansible-rulebook's output with -v (Python logging, asctime in local time): the event source's line
"mig_pending_pods: N pod(s) wait for MIG slices" is when the burst's event went out. ANSIBLE_LOG: the
demand playbook's ANSIBLE_LOG_PATH file (one line per play, task and result, asctime in local time).
WATCH_FILE: tests/cluster/helper.py watch-switch's JSON lines ("at": the wall clock): when the node's
allocatable first shows RESOURCE, when POD is bound to a node and when it runs.

Prints one JSON object: the points (seconds after CREATED_AT) and the segments between them, in order:
debounce (the scheduler marks the pod unschedulable, the event source's quiet period), rulebook to
playbook (the rule engine, ansible-runner, ansible-playbook starting), planning (facts, plan, Events,
the rollout's pre-flight and the host's decision), hand-over and apply (node labels, the GPU components
paused, the NVML changes), device plugin (the plugin back, its enumeration and registration, the kubelet's
node status), scheduling (the scheduler binds the pod), container start (the kubelet starts it).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import re
import sys
import time

STAMP = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\b')
EVENT_LINE = 'pod(s) wait for MIG slices'
HANDOVER_TASK = 'Hand the Kubernetes node over'
PLAYBOOK_LINE = 'PLAY [Plan the MIG instances the pending pods need]'
APPLY_TASK = 'Apply the layout (the module verifies the GPUs afterwards)'


def _wall(line):
    """Seconds since the epoch of a Python logging asctime line (local time), or None."""
    match = STAMP.match(line)
    if not match:
        return None
    moment = datetime.datetime.strptime(match.group(1), '%Y-%m-%d %H:%M:%S')
    return time.mktime(moment.timetuple()) + int(match.group(2)) / 1000.0


def _stamped(text, since):
    """(wall clock, line) of every stamped line at or after ``since``."""
    lines = []
    for line in text.splitlines():
        at = _wall(line)
        if at is not None and at >= since - 1:   # asctime has milliseconds; allow for the clock's rounding
            lines.append((at, line))
    return lines


def _task_start(lines, name):
    for at, line in lines:
        if 'TASK [' in line and name in line:
            return at
    return None


def _task_end(lines, name):
    """When the task after ``name`` started (or the recap): ``name`` ended then."""
    seen = False
    for at, line in lines:
        if seen and ('TASK [' in line or 'PLAY RECAP' in line or 'PLAY [' in line):
            return at
        if 'TASK [' in line and name in line:
            seen = True
    return None


def _watched(watch_lines, created_at, pod, advertises):
    """From the watch, after ``created_at``: when the node first advertised what the pod waits for (``advertises(at,
    allocatable)``), when ``pod`` was bound to a node and when it ran; None for a point not reached."""
    advertised = bound = running = None
    for entry in watch_lines:
        at = entry.get('at')
        if at is None or at < created_at:
            continue
        if entry.get('kind') == 'node' and advertised is None and advertises(at, entry.get('allocatable') or {}):
            advertised = at
        if entry.get('kind') == 'pod' and entry.get('name') == pod:
            if bound is None and entry.get('node'):
                bound = at
            if running is None and entry.get('phase') == 'Running' and entry.get('running'):
                running = at
    return advertised, bound, running


def _segments(created_at, points, names):
    """The time between consecutive points reached (``points``: (key, wall clock or None) in order; ``names``: key ->
    segment name): a point not reached has no time, and the next segment counts from the last point reached."""
    segments = []
    before = created_at
    for key, at in points:
        if at is None:
            segments.append({'segment': names[key], 'seconds': None})
            continue
        segments.append({'segment': names[key], 'seconds': round(at - before, 1)})
        before = at
    return segments


def timeline(created_at, rulebook_log, ansible_log, watch_lines, pod, resource):
    """The run that changed the node is the one that served the pod: its playbook start is the last start of the
    demand playbook before the node's hand-over, its event the last event before that start (a burst split in two
    makes two runs, one after the other)."""
    played = _stamped(ansible_log, created_at)
    handover = _task_start(played, HANDOVER_TASK)
    plays = [at for at, line in played if PLAYBOOK_LINE in line and (handover is None or at <= handover)]
    started = plays[-1] if plays else None
    events = [at for at, line in _stamped(rulebook_log, created_at) if EVENT_LINE in line and (started is None or at <= started)]
    recaps = [at for at, line in played if 'PLAY RECAP' in line and (handover is None or at >= handover)]
    advertised, bound, running = _watched(watch_lines, created_at, pod, lambda at, allocatable: allocatable.get(resource, 0) > 0)
    points = [
        ('event', events[-1] if events else None),
        ('playbook_start', started),
        ('handover_start', handover),
        ('applied', _task_end(played, APPLY_TASK)),
        ('advertised', advertised),
        ('bound', bound),
        ('running', running),
    ]
    names = {'event': 'debounce', 'playbook_start': 'rulebook to playbook', 'handover_start': 'planning',
             'applied': 'hand-over and apply', 'advertised': 'device plugin', 'bound': 'scheduling',
             'running': 'container start'}
    return {'points': dict((key, None if at is None else round(at - created_at, 1)) for key, at in points),
            'segments': _segments(created_at, points, names),
            'playbook_end': round(recaps[0] - created_at, 1) if recaps else None,
            'total': None if running is None else round(running - created_at, 1)}


FAST_EVENT_LINE = 'mig_pending_pods: fast create '
FAST_PLAYBOOK_LINE = 'PLAY [Create the instances the waiting pods need, only in free slices]'
FAST_CREATE_TASK = 'Create the instances in free slices (nvidia_mig_layout, create_only)'
FAST_SIGNAL_TASK = "Make the node's device plugin enumerate the new instances"
FAST_SEGMENTS = (('event', 'debounce'), ('playbook_start', 'rulebook to playbook'), ('created', 'lease and create'),
                 ('signalled', 'device plugin signal'), ('advertised', 'kubelet node status'), ('bound', 'scheduling'),
                 ('running', 'container start'))


def fast_timeline(created_at, rulebook_log, ansible_log, watch_lines, pod, resource, count):
    """One fast run: the source's fast event naming ``pod`` (the first after ``created_at``), the fast playbook that
    started after it, its create and signal tasks, the node advertising ``count`` of ``resource``, the pod bound and
    running."""
    events = [at for at, line in _stamped(rulebook_log, created_at)
              if FAST_EVENT_LINE in line and ' for ' in line
              and pod in [key.strip().split('/', 1)[-1] for key in line.rsplit(' for ', 1)[1].split(',')]]
    event = events[0] if events else None
    played = [(at, line) for at, line in _stamped(ansible_log, created_at) if event is None or at >= event]
    starts = [at for at, line in played if FAST_PLAYBOOK_LINE in line]
    started = starts[0] if starts else None
    run = [(at, line) for at, line in played if started is not None and at >= started]
    created = _task_end(run, FAST_CREATE_TASK)
    signalled = _task_end(run, FAST_SIGNAL_TASK)
    advertised, bound, running = _watched(
        watch_lines, created_at, pod,
        lambda at, allocatable: signalled is not None and at >= signalled - 1 and allocatable.get(resource, 0) >= count)
    points = [('event', event), ('playbook_start', started), ('created', created), ('signalled', signalled),
              ('advertised', advertised), ('bound', bound), ('running', running)]
    return {'pod': pod, 'points': dict((key, None if at is None else round(at - created_at, 1)) for key, at in points),
            'segments': _segments(created_at, points, dict(FAST_SEGMENTS)),
            'total': None if running is None else round(running - created_at, 1)}


def median(values):
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else round((ordered[middle - 1] + ordered[middle]) / 2.0, 2)


def fast_runs(rulebook_log, ansible_log, watch_lines, resource, runs):
    """Every run's timeline, and per segment (and the total) the median, minimum and maximum over the runs."""
    timelines = [fast_timeline(created_at, rulebook_log, ansible_log, watch_lines, pod, resource, count)
                 for pod, created_at, count in runs]
    summary = []
    for dummy, name in FAST_SEGMENTS + (('total', 'total'),):
        values = [t['total'] if name == 'total' else [s['seconds'] for s in t['segments'] if s['segment'] == name][0]
                  for t in timelines]
        known = [v for v in values if v is not None]
        summary.append({'segment': name, 'median': median(values), 'min': min(known) if known else None,
                        'max': max(known) if known else None, 'runs': values})
    return {'runs': timelines, 'summary': summary}


def main(argv):
    if argv and argv[0] == '--fast':
        rulebook_log, ansible_log, watch_file, resource = argv[1:5]
        runs = []
        for spec in argv[5:]:
            pod, created_at, count = spec.rsplit('=', 2)
            runs.append((pod, float(created_at), int(count)))
        with open(rulebook_log) as rulebook, open(ansible_log) as played, open(watch_file) as watch:
            watch_lines = [json.loads(line) for line in watch if line.strip()]
            result = fast_runs(rulebook.read(), played.read(), watch_lines, resource, runs)
        print(json.dumps(result, sort_keys=True))
        return
    created_at, rulebook_log, ansible_log, watch_file, pod, resource = argv
    with open(rulebook_log) as rulebook, open(ansible_log) as played, open(watch_file) as watch:
        watch_lines = [json.loads(line) for line in watch if line.strip()]
        result = timeline(float(created_at), rulebook.read(), played.read(), watch_lines, pod, resource)
    print(json.dumps(result, sort_keys=True))


if __name__ == '__main__':
    main(sys.argv[1:])

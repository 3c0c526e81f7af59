# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The rolling layout change of playbooks/mig_layout.yml, seen from the controller.

Pure Python: no NVML, no Ansible imports.

- :func:`rollout_settings`: ``mig_layout_serial`` and ``mig_layout_max_fail_percentage`` checked
  before any host is touched, each refused with one line.
- :func:`play_serial`: the rollout play's ``serial``: the change batches, or every host at once in check mode.
- :func:`batch_sizes`, :func:`progress`: batch k of n, hosts done, failed, failure budget left.
- :func:`unfinished`: the hosts the run fails, each with its reason.
- :func:`settled`: whether a host's first decision leaves the rollout nothing more to do there
  (:func:`final_for_dry_run`: whether it is the dry run's answer for the host);
  :func:`hosts_to_change`: the hosts it leaves to the rollout's batches.
- :func:`fleet_plan`: one plan of the whole fleet from the hosts' decisions (nvidia_mig_layout
  with ``apply: false``): per host and GPU before -> after, instances destroyed, pods to evict,
  hosts refused and why, totals.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

_PERCENT = re.compile(r'\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*\Z')
_NUMBER = re.compile(r'\s*([0-9]+(?:\.[0-9]+)?)\s*\Z')


class RolloutSettingsError(ValueError):
    """A rollout setting that cannot be used; the message is one line naming the variable."""


def _serial_item(value):
    """One value of mig_layout_serial -> a whole number of hosts (int) or a percentage ('50%'), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 1 else None
    if isinstance(value, float):
        return int(value) if value.is_integer() and value >= 1 else None
    if isinstance(value, str):
        # Ansible reads a percentage with int() (ansible/utils/helpers.py pct_to_int): whole numbers only.
        percent = re.match(r'\s*([0-9]+)\s*%\s*\Z', value)
        if percent:
            number = int(percent.group(1))
            return '%d%%' % number if 0 < number <= 100 else None
        whole = re.match(r'\s*([0-9]+)\s*\Z', value)
        if whole and int(whole.group(1)) >= 1:
            return int(whole.group(1))
    return None


def _serial(serial):
    items = serial if isinstance(serial, list) else [serial]
    checked = [_serial_item(item) for item in items]
    if not items or any(item is None for item in checked):
        raise RolloutSettingsError(
            'mig_layout_serial must be a whole number of hosts per batch (1 or more), a percentage of the play\'s '
            'hosts from 1%% to 100%% such as 25%%, or a list of them; got %r' % (serial,))
    return checked if isinstance(serial, list) else checked[0]


def _max_fail_percentage(value):
    """A number from 0 to 100; ``25%`` is read as 25: the variable is a percentage, so its sign adds nothing."""
    number = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        match = _PERCENT.match(value) or _NUMBER.match(value)
        number = float(match.group(1)) if match else None
    if number is None or not 0 <= number <= 100:
        raise RolloutSettingsError(
            'mig_layout_max_fail_percentage must be a percentage of the play\'s hosts from 0 to 100 (25 and 25%% are '
            'the same), got %r' % (value,))
    return int(number) if number.is_integer() else number


def rollout_settings(serial=1, max_fail_percentage=0):
    """{'serial', 'max_fail_percentage'} checked; raises RolloutSettingsError (one line) on the first bad one.

    ``serial`` is what Ansible's ``serial`` takes: a whole number >= 1, a percentage (``'50%'``) or a
    list of them; 0, negative numbers and text are refused (Ansible would read 0 as "all hosts").
    ``max_fail_percentage`` is a number from 0 to 100; ``'25%'`` is accepted as 25.
    """
    return {'serial': _serial(serial), 'max_fail_percentage': _max_fail_percentage(max_fail_percentage)}


# A dry run changes nothing, so nothing needs the batches' protection: Ansible runs the play on every host at
# once and forks alone bound the parallelism (ansible/executor/playbook_executor.py _get_serialized_batches: a
# serial of 100% is one batch of every host).
CHECK_MODE_SERIAL = '100%'


def play_serial(serial, check_mode=False):
    """The ``serial`` of the play that changes hosts: ``serial`` (mig_layout_serial) for a change, every host in
    one batch in check mode. A bad ``serial`` is passed on unchanged: the pre-flight refuses it first."""
    return CHECK_MODE_SERIAL if check_mode else serial


def _batch_size(item, host_count):
    if isinstance(item, str):
        return int(int(item[:-1]) / 100.0 * host_count) or 1
    return item


def batch_sizes(serial, host_count):
    """The batch sizes Ansible cuts ``host_count`` hosts into for ``serial`` (ansible/executor/playbook_executor.py
    ``_get_serialized_batches``: a percentage is int(hosts * percent / 100), at least 1; the last value of a list
    repeats)."""
    items = serial if isinstance(serial, list) else [serial]
    sizes = []
    left = host_count
    position = 0
    while left > 0:
        size = min(_batch_size(items[min(position, len(items) - 1)], host_count), left)
        sizes.append(size)
        left -= size
        position += 1
    return sizes


def allowed_failures(budget, host_count):
    """How many hosts may fail before the rollout stops: failures * 100 <= budget * hosts."""
    return int(math.floor(float(budget) * host_count / 100.0 + 1e-9))


def real_run_stop(hosts, settings, failed, fleet_size=None):
    """After a dry run: the batch (1-based) after which a real run of the same hosts would stop, or None.

    The real run's batches are those of ``settings['serial']``; it stops before a batch once the hosts that failed
    so far exceed the budget (a percentage of ``fleet_size`` hosts, by default those of ``hosts``), so the first batch
    whose end leaves more failures than allowed, with hosts after it.
    """
    allowed = allowed_failures(settings['max_fail_percentage'], len(hosts) if fleet_size is None else fleet_size)
    failing = set(failed)
    end = 0
    for number, size in enumerate(batch_sizes(settings['serial'], len(hosts)), 1):
        end += size
        if end < len(hosts) and len(failing.intersection(hosts[:end])) > allowed:
            return number
    return None


def progress(hosts, batch_hosts, settings, failed, check_mode=False, fleet_size=None):
    """One line and its figures after a batch: batch k of n, hosts done, failed, failure budget left.

    ``hosts``: the play's hosts in order (the hosts the rollout changes); ``batch_hosts``: those of the batch that just
    ran; ``failed``: the hosts failed or unreachable so far; ``fleet_size``: the number of hosts the failure budget is a
    percentage of (all the rollout's hosts, those its first decision found in the layout included; by default those of
    ``hosts``). In check mode every host is in the one batch (:func:`play_serial`) and the budget stops nothing: a spent
    budget says where a real run would stop.
    """
    sizes = batch_sizes(play_serial(settings['serial'], check_mode), len(hosts))
    done = hosts.index(batch_hosts[0]) + len(batch_hosts) if batch_hosts else 0
    batch = 0
    reached = 0
    while batch < len(sizes) and reached < done:
        reached += sizes[batch]
        batch += 1
    allowed = allowed_failures(settings['max_fail_percentage'], len(hosts) if fleet_size is None else fleet_size)
    left = allowed - len(failed)
    figures = {'batch': batch, 'batches': len(sizes), 'hosts': len(hosts), 'done': done, 'failed': len(failed),
               'budget_left': max(left, 0), 'over_budget': left < 0}
    stop = real_run_stop(hosts, settings, failed, fleet_size) if check_mode and left < 0 else None
    line = 'batch %d of %d: %d of %d host(s) done, %d failed%s; failure budget %s' % (
        batch, len(sizes), done, len(hosts), len(failed), ' (%s)' % ', '.join(sorted(failed)) if failed else '',
        'spent (check mode: a real run with mig_layout_serial=%s would stop after batch %d of %d)' % (
            settings['serial'], stop, len(batch_sizes(settings['serial'], len(hosts)))) if stop
        else 'spent: the rollout stops here' if left < 0 and done < len(hosts) else 'spent' if left < 0
        else 'left: %d more host(s) may fail (mig_layout_max_fail_percentage=%s)' % (left, settings['max_fail_percentage']))
    figures['line'] = line
    return figures


def hosts_to_change(hosts, decisions, check_mode=False):
    """The hosts of ``hosts`` (in order) the rollout play takes: those whose first decision (``decisions``: {host:
    registered result}) did not settle (:func:`settled`); a host found in its layout is done before the batches.

    In check mode a first decision that succeeded is the dry run's answer wherever the role would only repeat it
    (:func:`final_for_dry_run`): a dry run is one module call per host, and the fleet plan reads that decision."""
    final = final_for_dry_run if check_mode else settled
    return [host for host in hosts if not final(decisions.get(host))]


def settled(decision):
    """True when ``decision`` (a registered nvidia_mig_layout result with ``apply: false``) succeeded and found the host
    in its layout: the rollout has nothing more to do there. A skipped, failed or unreachable decision, or one that found
    the host different, is not: the role decides again there."""
    return (isinstance(decision, dict) and decision.get('in_layout') is True
            and not any(decision.get(key) for key in ('failed', 'unreachable', 'skipped'))
            and not persistence_pending(decision))


def final_for_dry_run(decision):
    """True when ``decision`` (the rollout's first decision) is all a dry run of the role would tell of the host.

    In check mode the role's own decision is the same call (the same options; only the host lock's wait differs) and its
    apply changes nothing, so it answers what this decision did (nvidia_mig_layout: check mode never applies). A
    decision that succeeded (it always carries ``in_layout``; a failure never, even with ``failed_when: false``) is
    final, unless its GPUs need a reboot: the role refuses that without mig_layout_allow_reboot and plans the reboot's
    drain otherwise, so it decides there. A skipped decision (a Kubernetes node: the layout its label requests is known
    only in the role) is not final either."""
    return settled(decision) or (isinstance(decision, dict) and 'in_layout' in decision and not any(
        decision.get(key) for key in ('failed', 'unreachable', 'skipped', 'reboot_required')))


def persistence_pending(decision):
    """The boot unit files and units a decision (which never calls systemctl) left for an apply to install."""
    return list(((decision or {}).get('persistence') or {}).get('pending') or [])


def unfinished(hosts, started, errors, settings, change):
    """{host: why it fails the run} for each host of ``hosts`` (the rollout's, in order) whose change failed, that
    could not be reached, or that the rollout stopped before; empty when every host got through.

    ``started``: the hosts the rollout reached (a host its first decision found in the layout included: it was done
    before the batches); ``errors``: {host: reason} of those that failed; ``change``: what the rollout applies, such
    as ``MIG layout nighttime`` or ``the MIG repack``.
    """
    failed = [host for host in hosts if host in errors]
    reasons = '; '.join('%s: %s' % (host, errors[host].rstrip('.')) for host in failed)
    stopped = ('Not changed: the rollout of %s stopped before this host because %d of %d host(s) failed, more than '
               'mig_layout_max_fail_percentage=%s percent allows: %s.' % (
                   change, len(failed), len(hosts), settings['max_fail_percentage'], reasons))
    return dict((host, errors[host] if host in errors else stopped) for host in hosts
                if host in errors or host not in started)


# ---- the fleet plan ------------------------------------------------------------------------------

def instances_text(instances):
    """GPU instances as ``7x1g.10gb`` or ``1x3g.40gb + 2x1g.10gb`` (largest first), ``no instances`` for none."""
    counts = {}
    for instance in instances or []:
        counts[instance['profile']] = counts.get(instance['profile'], 0) + 1
    if not counts:
        return 'no instances'
    return ' + '.join('%dx%s' % (counts[name], name) for name in sorted(
        counts, key=lambda name: (-_slices(name), name)))


def _slices(name):
    match = re.match(r'(?:[0-9]+c\.)?([0-9]+)g', name)
    return int(match.group(1)) if match else 0


def _mode_text(mode):
    current = (mode or {}).get('current')
    pending = (mode or {}).get('pending')
    if pending and pending != current:
        return 'MIG %s (%s pending)' % (current, pending)
    return 'MIG %s' % current


def _gpu_plan(gpu):
    """One GPU of a decision -> its plan: before and after (text), destroyed and created counts, pods."""
    mode = gpu.get('mode') or {}
    before_mode, after_mode = mode.get('before') or {}, mode.get('after') or {}
    before = instances_text(gpu.get('before'))
    if gpu.get('deferred') or gpu.get('after') is None:
        after = '%s, instances %s once MIG is on' % (
            _mode_text(after_mode), ', '.join('%s: %s' % (k, v) for k, v in sorted((gpu.get('mig_devices') or {}).items()))
            or 'none')
    else:
        after = instances_text(gpu.get('after'))
    if before_mode.get('current') != 'enabled':
        before = _mode_text(before_mode)
    if after_mode and after_mode.get('current') != 'enabled' and not gpu.get('deferred'):
        after = _mode_text(after_mode)
    kept_ids = set(i.get('id') for i in gpu.get('after') or [] if i.get('id') is not None)
    created = len([i for i in gpu.get('after') or [] if i.get('id') is None])
    destroyed = list(gpu.get('destroyed_instances') or [])
    return {
        'index': gpu.get('index'),
        'name': gpu.get('name'),
        'in_layout': bool(gpu.get('in_layout')),
        'before': before,
        'after': after,
        'instances_destroyed': len(destroyed),
        'instances_created': created,
        'instances_kept': len(kept_ids),
        'destroyed': ['%s at slice %s' % (i.get('profile'), (i.get('placement') or {}).get('start')) for i in destroyed],
        'pods_to_evict': sorted(gpu.get('pods_to_evict') or []),
        'reboot_required': bool(gpu.get('reboot_required')),
    }


def _host_plan(record):
    """One host's plan from its record; its ``status`` says what happened (a dry run: what would):

    ``change`` (its GPUs change; with ``warning`` when they did and the boot persistence failed), ``in layout``,
    ``refused`` (nothing changed: the change was refused or failed before any GPU changed), ``failed`` (the change
    failed after a GPU may have changed) or ``not reached`` (the rollout did not reach it, or could not)."""
    decision = record.get('decision') or {}
    host = {'host': record['host'], 'gpus': [], 'pods_to_evict': [], 'unmatched_gpus': [], 'reason': None,
            'warning': None, 'boot_units': []}
    if record.get('unreachable') or not record.get('started'):
        host.update(status='not reached', reason=record.get('error'))
        return host
    if record.get('error'):
        host.update(status='failed' if record.get('gpus_changed') else 'refused', reason=record['error'])
        return host
    if not decision:
        host.update(status='not reached', reason=None)
        return host
    host['gpus'] = [_gpu_plan(gpu) for gpu in decision.get('gpus') or []]
    host['pods_to_evict'] = sorted(decision.get('pods_to_evict') or [])
    host['unmatched_gpus'] = ['GPU %s: %s' % (g.get('index'), g.get('reason')) for g in decision.get('unmatched_gpus') or []]
    if not host['gpus'] and host['unmatched_gpus']:
        # No GPU of the host takes the layout: "in layout" would count GPUs it leaves as they are (the module refuses
        # such a host; a decision from before that rule still reads as refused).
        host.update(status='refused', reason='the layout matches none of its MIG-capable GPUs: %s' % '; '.join(host['unmatched_gpus']))
        return host
    host['boot_units'] = persistence_pending(decision)
    host['status'] = 'in layout' if decision.get('in_layout') and not host['boot_units'] else 'change'
    if record.get('persistence_error'):
        host['warning'] = 'boot persistence failed: %s' % record['persistence_error']
    host['kubernetes_node'] = record.get('kubernetes_node') or None
    return host


# A dry run decides on a Kubernetes node before the cordon; the real run decides again once the node is cordoned (no
# pod can start on an instance the change destroys meanwhile) and evicts what that decision names.
CORDON_NOTE = (' (decided before the cordon, as a dry run sees the node; a real run cordons it, decides again and evicts '
               'the pods that decision names)')

# At most this many hosts are named in the one line of a reason several hosts share.
NAMED_HOSTS = 10


def _shared_reason_lines(reasons, outcome, every):
    """One line per distinct reason of ``reasons`` ({host: reason}), with the hosts it concerns: a refusal common to the
    fleet is told once, not once per host."""
    by_reason = {}
    for host in sorted(reasons):
        by_reason.setdefault(reasons[host], []).append(host)
    lines = []
    for reason, hosts in sorted(by_reason.items(), key=lambda item: item[1][0]):
        if len(hosts) == 1:
            lines.append('%s: %s: %s' % (hosts[0], outcome, reason))
            continue
        named = ', '.join(hosts[:NAMED_HOSTS]) + (' and %d more' % (len(hosts) - NAMED_HOSTS) if len(hosts) > NAMED_HOSTS else '')
        lines.append('%s: %s: %s' % ('every host (%d)' % len(hosts) if every and len(hosts) == every else
                                     '%d hosts (%s)' % (len(hosts), named), outcome, reason))
    return lines


def _line(host, gpu):
    text = '%s GPU %s: %s -> %s' % (host['host'], gpu['index'], gpu['before'], gpu['after'])
    if gpu['in_layout']:
        return text + ' (in layout)'
    details = []
    if gpu['instances_destroyed']:
        details.append('%d instance(s) destroyed' % gpu['instances_destroyed'])
    if gpu['instances_kept']:
        details.append('%d kept' % gpu['instances_kept'])
    if gpu['pods_to_evict']:
        details.append('pods to evict: %s' % ', '.join(gpu['pods_to_evict']))
    if gpu['reboot_required']:
        details.append('needs a reboot')
    return text + (' (%s)' % ', '.join(details) if details else '')


def fleet_plan(records, layout, check_mode=False):
    """The plan of the whole fleet from each host's record, in the play's order.

    ``records``: [{'host', 'started' (its batch reached it), 'decision' (nvidia_mig_layout's result with
    ``apply: false``, or None), 'error' (why the host was refused or failed, or None), 'unreachable' (no decision could
    reach it), 'gpus_changed' (its failed change may have changed a GPU), 'persistence_error' (its GPUs reached the
    layout, then systemctl failed), 'kubernetes_node'}]. Returns {'layout', 'check_mode', 'hosts': [...],
    'refused': {host: reason}, 'failed': {host: reason}, 'not_reached': [hosts], 'warnings': {host: warning},
    'totals': {...}, 'lines': [one line per GPU that changes, per reason of refused or failed hosts (told once for the
    hosts it concerns), per host not reached, per warning, and the totals]}.
    """
    hosts = [_host_plan(record) for record in records]
    refused = dict((h['host'], h['reason']) for h in hosts if h['status'] == 'refused')
    failed = dict((h['host'], h['reason']) for h in hosts if h['status'] == 'failed')
    not_reached = [h['host'] for h in hosts if h['status'] == 'not reached']
    changing = [h for h in hosts if h['status'] == 'change']
    warnings = dict((h['host'], h['warning']) for h in changing if h['warning'])
    gpus = [(h, g) for h in changing for g in h['gpus'] if not g['in_layout']]
    pods = sorted(set(p for h in changing for p in h['pods_to_evict']))
    totals = {
        'hosts': len(hosts),
        'hosts_evaluated': len([h for h in hosts if h['status'] != 'not reached']),
        'hosts_to_change': len(changing),
        'hosts_in_layout': len([h for h in hosts if h['status'] == 'in layout']),
        'hosts_refused': len(refused),
        'hosts_failed': len(failed),
        'hosts_not_reached': len(not_reached),
        'hosts_persistence_failed': len(warnings),
        'gpus_to_change': len(gpus),
        'instances_destroyed': sum(g['instances_destroyed'] for dummy, g in gpus),
        'instances_created': sum(g['instances_created'] for dummy, g in gpus),
        'pods_to_evict': len(pods),
    }
    lines = [_line(h, g) for h, g in gpus]
    for h in changing:
        if h['pods_to_evict']:
            lines.append('%s: pods to evict%s: %s%s' % (
                h['host'], ' from node %s' % h['kubernetes_node'] if h.get('kubernetes_node') else '',
                ', '.join(h['pods_to_evict']), CORDON_NOTE if check_mode and h.get('kubernetes_node') else ''))
        if h['boot_units'] and not h['warning']:
            lines.append('%s: boot persistence to install (through systemctl, no GPU changes): %s' % (
                h['host'], ', '.join(h['boot_units'])))
    lines.extend(_shared_reason_lines(refused, 'refused', len(hosts)))
    lines.extend(_shared_reason_lines(failed, 'failed after a GPU may have changed', len(hosts)))
    lines.extend('%s: not reached%s' % (h['host'], ': %s' % h['reason'] if h['reason'] else '')
                 for h in hosts if h['status'] == 'not reached')
    lines.extend('%s: applied, %s' % (host, warning) for host, warning in sorted(warnings.items()))
    lines.append('%s %s: %d of %d host(s) evaluated, %d to change, %d in layout, %d refused, %d failed, %d not reached; '
                 '%d GPU(s) to change, %d instance(s) destroyed, %d created, %d pod(s) to evict%s' % (
                     'plan of layout' if check_mode else 'layout', layout, totals['hosts_evaluated'], totals['hosts'],
                     totals['hosts_to_change'], totals['hosts_in_layout'], totals['hosts_refused'], totals['hosts_failed'],
                     totals['hosts_not_reached'], totals['gpus_to_change'], totals['instances_destroyed'],
                     totals['instances_created'], totals['pods_to_evict'],
                     '; %d applied with a warning (boot persistence failed)' % len(warnings) if warnings else ''))
    return {'layout': layout, 'check_mode': bool(check_mode), 'hosts': hosts, 'refused': refused, 'failed': failed,
            'not_reached': not_reached, 'warnings': warnings, 'totals': totals, 'lines': lines}

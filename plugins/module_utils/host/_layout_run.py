# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""nvidia_mig_layout's run on the host: its options checked, the layout converged (_layout_converge.converge) with the
GPU clients stopped, the host's records and boot files kept, and the result the module returns.

No Ansible imports: the module hands in its options (``params``), check mode, systemctl's path and its run_command,
and reports what :class:`LayoutRunFailure` carries with fail_json.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import os
import sys

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.host import _boot_install, _host_files
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_record import (
    metrics_content,
    record_apply,
    record_persistence,
    resolve_failure,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_converge import LayoutRequest, converge, deferred_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils.host._systemd import SystemctlError, Systemd
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_allocations import expected_device_ids, node_resources, unread_pid_pods
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import check_layout, layout_problems, validate_file_or_configs
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import NothingMatchedError


class LayoutRunFailure(GpufleetError):
    """A refused or failed run; ``result``: what the module returns beside the message (``gpus_changed``, ...)."""

    def __init__(self, message, **result):
        super(LayoutRunFailure, self).__init__(message)
        self.result = result


def option_problem(params):
    """The one line that refuses a combination of the module's options, or None."""
    if params['evict'] and params['apply']:
        return 'evict decides the pods to evict and never applies: set apply=false with it'
    if params['drain'] and not params['evict']:
        return 'drain names the pods to evict: set evict=true (and apply=false) with it'
    if params['persistence_only'] and not (params['apply'] and params['create_only'] is None):
        return ('persistence_only installs the boot persistence of a host in the layout: set apply=true and no '
                'create_only with it')
    if params['destroy_idle'] and params['create_only'] is None:
        return 'destroy_idle names the idle instances a demand run expects to destroy: set create_only (may be {}) with it'
    return None


def host_paths(params):
    """Where the module's options put the host's files (the boot code runs with this Python unless ``python``)."""
    return _host_files.HostPaths(params['config_dir'], params['lib_dir'], params['bin_dir'], params['systemd_dir'],
                                 params['metrics_dir'], params['python'] or sys.executable, params['boot_environment'],
                                 params['pod_resources_socket'] if params['pod_resources'] != 'off' else None)


def keep_files(systemd, paths, request, boot_persistence, check_mode):
    """Write the boot-time files that differ; on an apply, enable the units (a changed unit reloads systemd first).

    Returns (the paths that changed, the boot persistence: ``pending`` units and ``error``). A decision writes no unit
    file and enables nothing (that needs systemctl): the units that differ or are not enabled are ``pending``, for the
    apply. An apply whose systemctl call fails keeps what it wrote and says why in ``error``: the GPUs are as the run
    left them, only the boot persistence failed.
    """
    files = _boot_install.boot_files(paths, request, boot_persistence, metrics_timer=bool(paths.metrics_dir))
    units = []
    if boot_persistence:
        units.append(_boot_install.LAYOUT_UNIT)
    if systemd.enabled and paths.metrics_dir:
        units.append(_boot_install.METRICS_TIMER)
    persistence = dict(pending=[], error=None)
    if systemd.enabled and units and not systemd.may_call:
        unit_files = [item for item in files if os.path.dirname(item[0]) == paths.systemd_dir.rstrip('/')]
        persistence['pending'] = sorted(set(os.path.basename(path) for path, content, dummy in unit_files
                                            if _host_files.differs(path, content))
                                        | set(unit for unit in units if not systemd.is_enabled(unit)))
        if not check_mode:
            files = [item for item in files if item not in unit_files]
    changed = _host_files.sync(files, check_mode)
    if systemd.usable and units and not check_mode:
        try:
            if any(path.startswith(paths.systemd_dir) for path in changed):
                systemd.must('daemon-reload')
            for unit in units:
                if not systemd.is_enabled(unit):
                    systemd.must('enable', '--now', unit) if unit.endswith('.timer') else systemd.must('enable', unit)
                    changed.append('systemd:%s enabled' % unit)
        except SystemctlError as exc:
            persistence['error'] = str(exc)
        record_persistence(paths.config_dir, request.name, persistence['error'], 'ansible')
    return changed, persistence


def refresh_metrics(host, paths, request, check_mode):
    """The metrics textfile for ``host`` as read (bookkeeping: never reported as a change)."""
    if paths.metrics_dir and not check_mode:
        content = metrics_content(host, request, paths.config_dir, request.pod_devices)
        _host_files.sync([(paths.metrics_file, content, 0o644)], False)


class LayoutRun(object):
    """One call of nvidia_mig_layout: what it was asked, checked before the host is read (:meth:`on_host` reads it).

    Refuses with a LayoutRunFailure (a combination of options, a host without systemctl for an apply that needs it,
    another owner of MIG) or a LayoutConfigError (the config), before anything is read from the GPUs.
    """

    def __init__(self, params, check_mode, systemctl, run_command):
        problem = option_problem(params)
        if problem:
            raise LayoutRunFailure(problem)
        self.params = params
        self.check_mode = check_mode
        configs = validate_file_or_configs(params['config'])
        entries = check_layout(configs, params['name'])
        self.problems = layout_problems(configs, skip=params['name'])
        self.paths = host_paths(params)
        # Only a change calls systemctl (clients stopped, units enabled); a decision or check mode reads the disk instead.
        self.systemd = Systemd(systemctl, run_command, params['systemd'], may_call=params['apply'] and not check_mode,
                               unit_folders=(params['systemd_dir'],))
        self.request = LayoutRequest(params['name'], entries, unmatched=params['unmatched'], allow_reset=params['allow_reset'],
                                     evict=params['evict'], drain=params['drain'], defer_pending=params['defer_pending'],
                                     create_only=params['create_only'], destroy_idle=params['destroy_idle'])
        if params['apply'] and not check_mode and self.systemd.missing():
            raise LayoutRunFailure(self.systemd.missing())
        owners = [] if params['allow_other_owner'] else self.systemd.running_or_enabled(params['other_owner_units'])
        if owners:
            raise LayoutRunFailure('MIG is already managed by %s on this host; two owners would undo each other\'s layouts. '
                                   'Disable it, or set allow_other_owner if you know what you are doing.' % ', '.join(owners),
                                   other_owners=owners, gpus_changed=False)
        # persistence_only: the GPUs are only decided on (never changed); the boot persistence is installed as by an apply.
        self.apply = params['apply'] and not check_mode and not params['persistence_only']

    def on_host(self, backend, pod_devices, pod_status):
        """Decide, apply unless a decision, keep the host's files: (the module's result, the warnings, the decision
        before and after the apply). Runs under the host lock (_module_support.nvml_session), with what pods hold read
        there too (``pod_devices`` None: not read), so that both are one snapshot no other run changes before the apply.
        A refusal before any NVML change, or a failed apply that knows where each GPU stands, is a LayoutRunFailure.
        """
        params, request, paths, check_mode = self.params, self.request, self.paths, self.check_mode
        clients = []
        # Set once the GPUs are about to change (the clients are stopped, the first NVML mutation follows): a failure
        # before it changed no GPU, which the role's hand-back needs to know (gpus_changed).
        gpus_reached = []

        @contextlib.contextmanager
        def hold_clients():
            with self.systemd.stopped(params['gpu_clients']) as stopped:
                gpus_reached.append(True)
                yield stopped
                clients.extend(stopped)

        request.pod_devices = pod_devices or []
        host = backend.read_host()
        # Without pod-resources, the pods of running processes are still known from their cgroups.
        request.pid_pods = unread_pid_pods(host, pod_devices)
        try:
            before, after, done, host = converge(backend, request, apply=self.apply, hold_clients=hold_clients, host=host)
        except Exception as exc:  # recorded for the metrics, then reported by the module
            if self.apply:
                record_apply(paths.config_dir, request.name, 'failed', 'ansible', str(exc))
                refresh_metrics(backend.read_host(), paths, request, check_mode)
            if getattr(exc, 'gpus', None):
                raise LayoutRunFailure(str(exc), gpu_states=exc.gpus, clients_stopped=clients,
                                       gpus_changed=any(state['status'] in ('applied', 'failed') for state in exc.gpus))
            if not gpus_reached and isinstance(exc, GpufleetError):
                # Refused before any NVML change (a busy instance, a pod in the way): the host is exactly as it was.
                # A layout that matches none of its GPUs names them (the rollout's pre-flight checks the fleet with them).
                told = {'unmatched_gpus': exc.unmatched_gpus} if isinstance(exc, NothingMatchedError) else {}
                raise LayoutRunFailure(str(exc), clients_stopped=clients, gpus_changed=False, **told)
            raise
        if params['persistence_only'] and not before.in_layout:
            raise LayoutRunFailure('MIG layout %s: only its boot persistence was to be installed, but the GPUs no longer hold '
                                   'it (they changed since the decision); nothing was changed' % request.name,
                                   gpus_changed=False)
        deferred = deferred_gpus(done)
        if done and not deferred:
            record_apply(paths.config_dir, request.name, 'success', 'ansible')
        elif before.in_layout and not check_mode:
            # A no-op run (the role's decision on a host in the layout included) is a success too.
            resolve_failure(paths.config_dir, request.name, 'ansible')
        # The declared layout (and the boot unit that names it) becomes this one only once the host
        # holds it or the apply brought it there (a mode pending a reboot included): after a decision
        # alone, or a refused change, a reboot still applies the previous one.
        files = []
        persistence = dict(pending=[], error=None)
        if (params['apply'] and not deferred) or before.in_layout:
            files, persistence = keep_files(self.systemd, paths, request, params['boot_persistence'], check_mode)
            refresh_metrics(host, paths, request, check_mode)
        warnings = []
        if persistence['error']:
            # The GPUs hold what the run left them (last_apply.json says so); only the boot unit failed: a warning and
            # its own record and metric (gpufleet_mig_boot_persistence_success), never a failed run.
            warnings.append('MIG layout %s %s, boot persistence failed: %s' % (
                request.name, 'applied' if done else 'in layout', persistence['error']))
        for gpu in before.unmatched:
            warnings.append('GPU %s (%s) is left as it is: %s' % (gpu['index'], gpu.get('name'), gpu['reason']))
        final = after or before
        output = dict(
            changed=bool(done) or bool(files) or (check_mode and params['apply'] and not before.in_layout),
            layout=request.name,
            in_layout=final.in_layout,
            reboot_required=final.reboot_required or bool(deferred),
            gpus=[g.as_dict() for g in before.gpus],
            actions=done,
            unmatched_gpus=before.unmatched,
            skipped_gpus=before.skipped,
            layout_problems=self.problems,
            files=files,
            clients_stopped=clients,
            pods_to_evict=before.pods_to_evict(),
            eviction_reasons=before.eviction_reasons(),
            pod_resources=dict(pod_status, allocations=pod_devices or [], pods=before.holders.pods()),
            resources=node_resources(host),
            expected_device_ids=expected_device_ids(host),
            systemd=self.systemd.enabled,
            persistence=persistence,
        )
        return output, warnings, (before, after)

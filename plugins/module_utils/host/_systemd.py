# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The few systemctl calls nvidia_mig_layout makes: the GPU clients stopped and started, the boot units enabled, the
other owners of MIG looked for. No Ansible imports: the module hands in systemctl's path and its run_command."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.host import _host_files


class SystemctlError(GpufleetError):
    """A systemctl call failed; the message names the call, its exit status and its output."""


class Systemd(object):
    """The few systemctl calls the module makes, as argument lists; a no-op where systemd does not run.

    ``command``: systemctl's path, or None where it is not on PATH; ``run_command``: the module's (an argument list
    in, (rc, stdout, stderr) out). ``wanted``: the systemd option; None detects it (systemctl on PATH and systemd
    managing the host, _host_files.systemd_runs). ``may_call``: whether this run may call systemctl at all: an apply,
    not check mode.
    A decision (apply=false) and check mode never do, whatever ``wanted`` says: they read what systemctl would
    answer from the unit links and the running units' ids on disk (_host_files), so that a read-only run never
    needs it; :meth:`missing` is the one line an apply fails with where it is missing.
    A failed call raises SystemctlError rather than calling fail_json, so that the GPU clients stopped
    for a change are still started again on the way out.
    """

    def __init__(self, command, run_command, wanted, may_call, unit_folders=()):
        self.command = command
        self.run_command = run_command
        self.enabled = wanted if wanted is not None else bool(self.command) and _host_files.systemd_runs()
        self.may_call = may_call
        self.usable = self.enabled and bool(self.command) and may_call
        self.unit_folders = tuple(unit_folders) + tuple(f for f in _host_files.UNIT_FOLDERS if f not in unit_folders)

    def missing(self):
        """Why an apply cannot run with systemd=true here (no systemctl on PATH), or None."""
        if self.enabled and not self.command:
            return ('systemd=true but systemctl is not on this host\'s PATH: an apply stops the GPU clients and enables '
                    'the boot unit with it; on a host without systemd set systemd=false (the mig_layout role: '
                    'mig_layout_systemd: false), or leave it unset to detect systemd')
        return None

    def _run(self, *args):
        if not self.may_call:
            # A guard, not a path: every caller checks usable first.
            raise SystemctlError('a read-only run called systemctl %s' % ' '.join(args))
        return self.run_command([self.command] + list(args))

    def is_active(self, unit):
        if self.enabled and not self.may_call:
            return _host_files.unit_running_on_disk(unit)
        return self.usable and self._run('is-active', '--quiet', unit)[0] == 0

    def is_enabled(self, unit):
        if self.enabled and not self.may_call:
            return _host_files.unit_enabled_on_disk(unit, self.unit_folders)
        return self.usable and self._run('is-enabled', '--quiet', unit)[0] == 0

    def _failure(self, args):
        """The error of ``systemctl <args>``, or None when it succeeded."""
        rc, out, err = self._run(*args)
        if rc == 0:
            return None
        return 'systemctl %s failed (rc=%d): %s' % (' '.join(args), rc, ' '.join((err or out).split()))

    def must(self, *args):
        failure = self._failure(args)
        if failure:
            raise SystemctlError(failure)

    @contextlib.contextmanager
    def stopped(self, units):
        """Stop the running units among ``units`` for the duration; start every one again even on failure.

        A start that fails does not keep the others stopped: all are tried, then the failures are
        raised together, after the error that ended the change, if any.
        """
        stopped = []
        original = None
        try:
            for unit in units:
                if self.is_active(unit):
                    self.must('stop', unit)
                    stopped.append(unit)
            yield stopped
        except Exception as exc:
            original = exc
            raise
        finally:
            failures = []
            for unit in reversed(stopped):
                failure = self._failure(('start', unit))
                if failure:
                    failures.append(failure)
            if failures:
                first = '%s; then ' % original if original is not None else ''
                raise SystemctlError('%sstarting the stopped GPU clients again failed: %s' % (first, '; '.join(failures)))

    def running_or_enabled(self, units):
        """The units of ``units`` that run or are enabled: another owner of MIG would undo the module's layouts."""
        return [unit for unit in units if self.is_active(unit) or self.is_enabled(unit)]

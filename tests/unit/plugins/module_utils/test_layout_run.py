# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_mig_layout's run without the module: its option rules (host/_layout_run) and its systemctl calls
(host/_systemd). The run itself is tested through the module (tests/unit/plugins/modules/test_nvidia_mig_layout.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _host_files
from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_run import option_problem
from ansible_collections.gpufleet.mig.plugins.module_utils.host._systemd import SystemctlError, Systemd


def options(apply, evict, drain, persistence_only, create_only, destroy_idle=None):
    return dict(apply=apply, evict=evict, drain=drain, persistence_only=persistence_only, create_only=create_only,
                destroy_idle=destroy_idle)


@pytest.mark.parametrize('apply, evict, drain, persistence_only, create_only', list(itertools.product(
    (True, False), (True, False), (True, False), (True, False), (None, {'0': {'1g.10gb': 1}}))))
def test_each_combination_of_options_is_refused_by_its_rule_or_runs(apply, evict, drain, persistence_only, create_only):
    """evict never applies, drain needs evict, persistence_only needs an apply and no create_only; the first rule
    broken is the one told, and a combination that breaks none runs."""
    problem = option_problem(options(apply, evict, drain, persistence_only, create_only))
    if evict and apply:
        assert problem.startswith('evict decides the pods to evict and never applies')
    elif drain and not evict:
        assert problem.startswith('drain names the pods to evict: set evict=true')
    elif persistence_only and not (apply and create_only is None):
        assert problem.startswith('persistence_only installs the boot persistence')
    else:
        assert problem is None


def test_destroy_idle_needs_create_only():
    """The idle destroys a demand run expects come with its creates (an empty create_only for a destroy alone)."""
    assert option_problem(options(True, False, False, False, None, {'0': {'1g.10gb': 1}})).startswith(
        'destroy_idle names the idle instances a demand run expects to destroy: set create_only')
    assert option_problem(options(True, False, False, False, {}, {'0': {'1g.10gb': 1}})) is None
    assert option_problem(options(True, False, False, False, None, {})) is None


def recording():
    calls = []

    def run_command(args):
        calls.append(args)
        return (0, '', '')
    return calls, run_command


def test_a_read_only_run_never_calls_systemctl_and_reads_the_units_on_disk(tmp_path, monkeypatch):
    wants = tmp_path / 'etc' / 'multi-user.target.wants'
    wants.mkdir(parents=True)
    (wants / 'nvidia-mig-manager.service').write_text('')
    running = tmp_path / 'units'
    running.mkdir()
    (running / 'invocation:nvidia-dcgm.service').write_text('')
    monkeypatch.setattr(_host_files, 'RUNNING_UNITS', str(running))
    monkeypatch.setattr(_host_files, 'UNIT_FOLDERS', ())
    calls, run_command = recording()
    systemd = Systemd('/usr/bin/systemctl', run_command, True, may_call=False, unit_folders=(str(tmp_path / 'etc'),))
    assert systemd.running_or_enabled(['nvidia-mig-manager.service', 'nvidia-dcgm.service', 'nvsm.service']) == [
        'nvidia-mig-manager.service', 'nvidia-dcgm.service']
    with pytest.raises(SystemctlError, match='a read-only run called systemctl stop nvsm.service'):
        systemd.must('stop', 'nvsm.service')
    assert calls == []


def test_systemd_true_without_systemctl_is_told_before_an_apply_and_calls_nothing():
    calls, run_command = recording()
    systemd = Systemd(None, run_command, True, may_call=True)
    assert 'systemctl is not on this host\'s PATH' in systemd.missing() and not systemd.usable
    assert systemd.running_or_enabled(['nvidia-mig-manager.service']) == [] and calls == []
    assert Systemd(None, run_command, False, may_call=True).missing() is None


def test_every_stopped_unit_is_started_again_and_the_failed_starts_are_told_after_the_error():
    calls = []
    active = {'a.service', 'b.service'}

    def run_command(args):
        calls.append(args[1:])
        verb, unit = args[1], args[-1]
        if verb == 'is-active':
            return (0 if unit in active else 3), '', ''
        return (1, '', 'Job for %s failed.' % unit) if verb == 'start' and unit == 'a.service' else (0, '', '')
    systemd = Systemd('/usr/bin/systemctl', run_command, True, may_call=True)
    with pytest.raises(SystemctlError) as failed:
        with systemd.stopped(['a.service', 'b.service', 'c.service']) as stopped:
            assert stopped == ['a.service', 'b.service']
            raise SystemctlError('NVML_ERROR_UNKNOWN')
    assert [call for call in calls if call[0] == 'start'] == [['start', 'b.service'], ['start', 'a.service']]
    assert str(failed.value) == ('NVML_ERROR_UNKNOWN; then starting the stopped GPU clients again failed: '
                                 'systemctl start a.service failed (rc=1): Job for a.service failed.')

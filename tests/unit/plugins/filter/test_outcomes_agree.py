# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 39: over generated host outcomes of a layout change (in layout, applied, refused at the decision, refused at the
apply, failed after the GPU change, unreachable, applied with the boot persistence failed), the fleet plan's totals, the
metrics each host writes and the alerts they raise agree with each other and with the GPUs' state.

Each host is a simulated H100 holding daytime, driven as the mig_layout role drives it (its decision, its apply where
the decision found a difference or a pending boot persistence, nvidia_mig_layout_failure in its rescue), with the real
modules; the plan is the real filter's, read from the facts the role leaves.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpufleet.mig.plugins.filter.mig_layout import mig_layout_fleet_plan
from ansible_collections.gpufleet.mig.plugins.module_utils.host import _host_files
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_layout, nvidia_mig_layout_failure
from ansible_collections.gpufleet.mig.tests.unit.conftest import SIMULATOR_ENV, SimulatedHost

DAY = {'daytime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}]}
NIGHT = {'nighttime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}}]}
ENABLED = {'current': 'enabled', 'pending': 'enabled'}
LOST = 'unreachable in the middle of the change, its state is unknown:'
RULES = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'mig_layout', 'files', 'prometheus',
                     'gpufleet-mig.rules.yml')
OUTCOMES = ('in layout', 'applied', 'refused at the decision', 'refused at the apply', 'failed after the GPU change',
            'unreachable', 'boot persistence failed')

# systemctl on a host systemd did not boot: reads say "not there", every other call fails.
FAILING = '#!/bin/sh\ncase "$1" in is-active|is-enabled) exit 3;; esac\necho "System has not been booted with systemd" >&2\nexit 1\n'
# Another owner of MIG enabled after the decision read the disk (the host changed between decision and apply).
OWNER = '#!/bin/sh\ncase "$1 $3" in "is-enabled nvidia-mig-manager.service") exit 0;; esac\ncase "$1" in is-*) exit 3;; esac\nexit 0\n'


def alert_metrics():
    """{alert: metric} of the alerts on a host's apply outcome, read from the shipped rules (each is ``metric == 0``)."""
    with open(RULES) as handle:
        rules = [rule for group in yaml.safe_load(handle)['groups'] for rule in group['rules'] if 'alert' in rule]
    wanted = {}
    for rule in rules:
        match = re.match(r'^(gpufleet_mig_(?:layout_last_apply|boot_persistence)_success) == 0$', rule['expr'])
        if match:
            wanted[rule['alert']] = match.group(1)
    assert sorted(wanted) == ['MigBootPersistenceFailed', 'MigLayoutApplyFailed'], wanted
    return wanted


def samples(metrics_file, name):
    with open(metrics_file) as handle:
        return [float(line.split()[-1]) for line in handle if line.startswith(name + '{')]


class Host(object):
    """One simulated host and the folders nvidia_mig_layout keeps there."""

    def __init__(self, root, name, outcome, monkeypatch, run_module):
        self.name, self.outcome, self.run_module, self.monkeypatch = name, outcome, run_module, monkeypatch
        self.root = os.path.join(root, name)
        self.bin = os.path.join(self.root, 'bin')
        os.makedirs(self.bin)
        self.paths = dict(config_dir=os.path.join(self.root, 'etc'), lib_dir=os.path.join(self.root, 'lib'),
                          bin_dir=os.path.join(self.root, 'sbin'), systemd_dir=os.path.join(self.root, 'systemd'),
                          metrics_dir=os.path.join(self.root, 'metrics'))
        gpu = {'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED)}
        if outcome == 'refused at the decision':
            gpu['gpu_instances'] = [{'profile': '1g.10gb', 'start': 0,
                                     'compute_instances': [{'profile': '1g.10gb', 'start': 0, 'pids': [4242]}]}]
        self.sim = SimulatedHost(os.path.join(self.root, 'host.json'))
        faults = []
        if outcome == 'failed after the GPU change':
            faults = [{'call': 'nvmlDeviceCreateGpuInstanceWithPlacement', 'gpu': 0, 'nth': 1, 'error': 'NVML_ERROR_UNKNOWN'}]
        self.sim.write({'driver_version': '580.95.05', 'gpus': [gpu], 'faults': []})
        # Where it starts: the layout it holds declared, applied with success (the metrics say so).
        self.use()
        start = NIGHT if outcome == 'in layout' else DAY
        result, failed = self.module(start, systemd=False)
        assert not failed, result
        state = self.sim.read()
        state['faults'] = faults
        self.sim.write(state)
        self.gpus_before = state['gpus']

    def use(self):
        self.monkeypatch.setenv(SIMULATOR_ENV, self.sim.path)
        self.monkeypatch.setenv('PATH', self.bin)

    def systemctl(self, script):
        path = os.path.join(self.bin, 'systemctl')
        with open(path, 'w') as handle:
            handle.write(script)
        os.chmod(path, 0o755)

    def module(self, config, **extra):
        args = dict(name=sorted(config)[0], config=config, **self.paths)
        args.update(extra)
        return self.run_module(nvidia_mig_layout.main, args)

    def facts(self):
        """Run the role's steps on the host; the facts it leaves (what the fleet plan reads)."""
        facts = {'mig_layout_rollout_started': True}
        if self.outcome == 'unreachable':
            facts['mig_layout__decision'] = {'unreachable': True, 'msg': 'Failed to connect to the host via ssh'}
            facts['mig_layout_rollout_error'] = facts['mig_layout__failure_reason'] = LOST + ' Failed to connect'
            return facts
        self.use()
        systemd = self.outcome in ('boot persistence failed', 'refused at the apply')
        if self.outcome == 'boot persistence failed':
            self.systemctl(FAILING)
        elif self.outcome == 'refused at the apply':
            self.systemctl(OWNER)
        decision, failed = self.module(NIGHT, systemd=systemd, apply=False)
        facts['mig_layout__decision'] = dict(decision, failed=True) if failed else decision
        if not failed and (not decision['in_layout'] or decision['persistence']['pending']):
            register = 'mig_layout__applied' if not decision['in_layout'] else 'mig_layout__persisted'
            facts['mig_layout__gpu_touched'] = not decision['in_layout']
            applied, failed = self.module(NIGHT, systemd=systemd)
            facts[register] = dict(applied, failed=True) if failed else applied
            result = applied
        else:
            result = decision
        if failed:
            facts['mig_layout__failure_reason'] = facts['mig_layout_rollout_error'] = result['msg']
            self.run_module(nvidia_mig_layout_failure.main, dict(
                name='nighttime', config=NIGHT, reason=result['msg'], config_dir=self.paths['config_dir'],
                metrics_dir=self.paths['metrics_dir']))
        return facts

    def holds_night(self):
        self.use()
        self.monkeypatch.setenv('PATH', '')
        state = self.sim.read()
        state['faults'] = []
        self.sim.write(state)
        decision, failed = self.module(NIGHT, systemd=False, apply=False, config_dir=os.path.join(self.root, 'probe'),
                                       metrics_dir='')
        return not failed and decision['in_layout']


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(outcomes=st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=5))
def test_plan_totals_metrics_and_alerts_agree_with_the_gpus(outcomes, run_module, monkeypatch):
    alerts = alert_metrics()
    root = tempfile.mkdtemp(prefix='outcomes-')
    monkeypatch.setattr(_host_files, 'UNIT_FOLDERS', ())
    monkeypatch.setattr(_host_files, 'RUNNING_UNITS', os.path.join(root, 'units'))
    monkeypatch.setattr(_host_files, 'SYSTEMD_CANARIES', (os.path.join(root, 'no-systemd') + '/',))
    hosts = [Host(root, 'h%d' % number, outcome, monkeypatch, run_module) for number, outcome in enumerate(outcomes)]
    hostvars = dict((host.name, host.facts()) for host in hosts)
    plan = mig_layout_fleet_plan([host.name for host in hosts], hostvars, 'nighttime')
    status = dict((h['host'], h) for h in plan['hosts'])
    firing = dict((alert, set()) for alert in alerts)
    for host in hosts:
        metrics_file = os.path.join(host.paths['metrics_dir'], _host_files.METRICS_FILE)
        for alert, metric in alerts.items():
            if any(value == 0 for value in samples(metrics_file, metric)):
                firing[alert].add(host.name)
    holding = set(host.name for host in hosts if host.holds_night())
    reached = set(host.name for host in hosts if host.outcome != 'unreachable')
    for host in hosts:
        told = status[host.name]
        gpus_now = host.sim.read()['gpus']
        # The GPUs: the plan says changed or in layout exactly where they hold the layout.
        assert (told['status'] in ('change', 'in layout')) == (host.name in holding), (host.outcome, told)
        # A refusal changed no GPU; a failure after the change is told as such.
        if told['status'] == 'refused':
            assert gpus_now == host.gpus_before, host.outcome
        assert (told['status'] == 'failed') == (host.outcome == 'failed after the GPU change'), (host.outcome, told)
        assert (told['status'] == 'not reached') == (host.outcome == 'unreachable'), (host.outcome, told)
        # The GPUs' alert fires exactly where the plan says refused or failed; the persistence one where it warns.
        if host.name in reached:
            assert (host.name in firing['MigLayoutApplyFailed']) == (told['status'] in ('refused', 'failed')), host.outcome
        assert (host.name in firing['MigBootPersistenceFailed']) == bool(told['warning']), (host.outcome, told)
        assert bool(told['warning']) == (host.outcome == 'boot persistence failed'), (host.outcome, told)
    totals = plan['totals']
    assert totals['hosts_to_change'] + totals['hosts_in_layout'] == len(holding)
    assert totals['hosts_refused'] + totals['hosts_failed'] == len(firing['MigLayoutApplyFailed'] & reached)
    assert totals['hosts_persistence_failed'] == len(firing['MigBootPersistenceFailed']) == len(plan['warnings'])
    assert totals['hosts_not_reached'] == len(hosts) - len(reached) == len(plan['not_reached'])
    assert sum(totals[key] for key in ('hosts_to_change', 'hosts_in_layout', 'hosts_refused', 'hosts_failed',
                                       'hosts_not_reached')) == len(hosts)


@pytest.mark.parametrize('outcome', OUTCOMES)
def test_each_outcome_alone(outcome, run_module, monkeypatch):
    """Every outcome at least once, whatever the generator draws."""
    test_plan_totals_metrics_and_alerts_agree_with_the_gpus.hypothesis.inner_test(
        outcomes=[outcome], run_module=run_module, monkeypatch=monkeypatch)

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real scrape of a simulated host: node_exporter's textfile collector on the folder the role writes its metrics
to, Prometheus scraping it with the shipped rules, both on loopback ports of their own, both always stopped.

The role (ansible-playbook on localhost with the NVML simulator) switches the host to daytime, then fails a
change to nighttime on an injected NVML fault; the metrics timer's own command then refreshes the metrics after a
process started on an instance. Prometheus's HTTP API must show every sample of the textfile with its labels and
value, the recording rules, MigLayoutApplyFailed firing and MigGpuOutOfLayout pending, and the refresh within the
timer's interval. ``promtool check metrics`` must accept the textfile and what node_exporter serves of it.

Run: PYTHONPATH=build/collections .venv/bin/python -m pytest -q -p no:cacheprovider tests/prometheus/test_scrape.py
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml

from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_files import METRICS_FILE
from ansible_collections.gpufleet.mig.tests.prometheus.fleet import REPO, RULES, parse_exposition, shipped_rules
from ansible_collections.gpufleet.mig.tests.support.playbook import ansible_environment, run_playbook
from ansible_collections.gpufleet.mig.tests.support.simulator import simulated_environment
import gpufleet_nvml_sim as simulator

from urllib.parse import urlencode
from urllib.request import urlopen

PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'layout.yml')
MODELS = ('A100-SXM4-80GB', 'H100-SXM5-80GB', 'A30', 'L40S')   # GPU 3 has no MIG: it has no metrics
SCRAPE_SECONDS = 1
START_TIMEOUT = 60     # seconds for a process to answer, and for the first scrape with the rules evaluated
PLAYBOOK_TIMEOUT = 600
JOB = 'gpufleet-node'


def free_port():
    """A loopback TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def http_get(url, timeout=5):
    with urlopen(url, timeout=timeout) as answer:
        return answer.read().decode('utf-8')


def wait_for(what, probe, timeout, logs=()):
    """``probe()``'s first truthy answer within ``timeout`` seconds, polled; an AssertionError naming ``what`` (a text,
    or a function giving it) and the end of the ``logs`` files when none comes. Returns (answer, seconds waited)."""
    started = time.monotonic()
    last = None
    while True:
        try:
            answer = probe()
        except (OSError, ValueError) as exc:   # not listening yet, or an answer that is not JSON yet
            answer, last = None, exc
        if answer:
            return answer, time.monotonic() - started
        if time.monotonic() - started > timeout:
            tails = []
            for path in logs:
                with open(path, errors='replace') as handle:
                    tails.append('--- %s\n%s' % (path, handle.read()[-3000:]))
            raise AssertionError('%s: not within %d s (last error: %s)\n%s' % (
                what() if callable(what) else what, timeout, last, '\n'.join(tails)))
        time.sleep(0.2)


class Daemon(object):
    """A process in its own session, its output in a log file; stop() ends its process group and waits for it."""

    def __init__(self, name, argv, directory):
        self.name = name
        self.log = os.path.join(directory, '%s.log' % name)
        with open(self.log, 'w') as handle:
            self.process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)

    def stop(self):
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=15)


class Prometheus(object):
    """The HTTP API of the Prometheus under test."""

    def __init__(self, url, logs):
        self.url = url
        self.logs = logs

    def api(self, path, **params):
        answer = json.loads(http_get('%s/api/v1/%s?%s' % (self.url, path, urlencode(params))))
        assert answer['status'] == 'success', answer
        return answer['data']

    def query(self, expr, names=False):
        """{frozenset of labels: value} of an instant query (the metric name as __name__ only with ``names``)."""
        return dict((frozenset((k, v) for k, v in sample['metric'].items() if names or k != '__name__'), float(sample['value'][1]))
                    for sample in self.api('query', query=expr)['result'])

    def wait(self, what, expr, check, timeout=START_TIMEOUT):
        """Poll ``expr`` until ``check(result)``; returns (result, seconds)."""
        def probe():
            result = self.query(expr)
            return result if check(result) else None
        return wait_for(what, probe, timeout, self.logs)

    def alerts(self, name):
        return [alert for alert in self.api('alerts')['alerts'] if alert['labels']['alertname'] == name]


@pytest.fixture
def host(tmp_path):
    """A simulated host's folders: the state file (four GPUs, MIG off) and what the role keeps there."""
    root = tmp_path / 'host'
    folders = dict((name, str(root / path)) for name, path in (
        ('systemd', 'etc/systemd/system'), ('config', 'etc/gpufleet-mig'), ('lib', 'usr/local/lib/gpufleet-mig'),
        ('bin', 'usr/local/sbin'), ('metrics', 'var/lib/prometheus/node-exporter')))
    os.makedirs(folders['metrics'])
    state = str(root / 'gpus.json')
    simulator.write_state(state, {'driver_version': '580.95.05', 'gpus': [{'model': model} for model in MODELS]})
    folders['state'] = state
    return folders


@pytest.fixture
def monitoring(prometheus_binaries, host, tmp_path):
    """node_exporter on the host's metrics folder and Prometheus scraping it every second with the shipped rules,
    evaluated every second; both stopped after the test, whatever happens."""
    exporter_port, prometheus_port = free_port(), free_port()
    config = tmp_path / 'prometheus.yml'
    config.write_text(yaml.safe_dump({
        'global': {'scrape_interval': '%ds' % SCRAPE_SECONDS, 'evaluation_interval': '%ds' % SCRAPE_SECONDS},
        'rule_files': [RULES],
        'scrape_configs': [{'job_name': JOB, 'static_configs': [{'targets': ['127.0.0.1:%d' % exporter_port]}]}],
    }))
    daemons = []
    try:
        daemons.append(Daemon('node_exporter', [
            prometheus_binaries['prometheus-node-exporter'], '--web.listen-address=127.0.0.1:%d' % exporter_port,
            '--collector.disable-defaults', '--collector.textfile', '--collector.textfile.directory=%s' % host['metrics'],
        ], str(tmp_path)))
        daemons.append(Daemon('prometheus', [
            prometheus_binaries['prometheus'], '--config.file=%s' % config, '--storage.tsdb.path=%s' % (tmp_path / 'tsdb'),
            '--web.listen-address=127.0.0.1:%d' % prometheus_port,
        ], str(tmp_path)))
        logs = [daemon.log for daemon in daemons]
        exporter = 'http://127.0.0.1:%d/metrics' % exporter_port
        wait_for('node_exporter answering on %s' % exporter, lambda: http_get(exporter), START_TIMEOUT, logs)
        prometheus = Prometheus('http://127.0.0.1:%d' % prometheus_port, logs)
        wait_for('Prometheus ready', lambda: 'Ready' in http_get(prometheus.url + '/-/ready'), START_TIMEOUT, logs)
        prometheus.exporter = exporter
        prometheus.instance = '127.0.0.1:%d' % exporter_port
        yield prometheus
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


def run_role(host, layout):
    """ansible-playbook on localhost: the role, the simulated GPUs, the host's folders."""
    extravars = {
        'ansible_connection': 'local',
        'ansible_python_interpreter': sys.executable,
        'mig_layout_name': layout,
        'mig_layout_install_dependencies': False,
        'mig_layout_systemd': False,
        'mig_layout_boot_environment': simulated_environment(host['state']),
        'mig_layout_systemd_dir': host['systemd'],
        'mig_layout_config_dir': host['config'],
        'mig_layout_lib_dir': host['lib'],
        'mig_layout_bin_dir': host['bin'],
        'mig_layout_metrics_dir': host['metrics'],
    }
    return run_playbook(PLAYBOOK, inventory='localhost,', extravars=extravars, envvars=ansible_environment(),
                        project_dir=REPO, timeout=PLAYBOOK_TIMEOUT)


def textfile(host):
    with open(os.path.join(host['metrics'], METRICS_FILE)) as handle:
        return handle.read()


def samples(exposition):
    """{labels with __name__: value} of a textfile; a label with an empty value (pods="") is no label to Prometheus."""
    return dict((frozenset((k, v) for k, v in labels.items() if v) | {('__name__', name)}, value)
                for name, labels, value in parse_exposition(exposition))


def in_prometheus(prometheus, exposition):
    """The textfile's samples as Prometheus has them now, scrape labels taken off; None until they all match
    (the difference is kept in prometheus.difference for the failure message)."""
    scraped = prometheus.query('{__name__=~"gpufleet_mig_.+", job="%s"}' % JOB, names=True)
    found = dict((frozenset(k for k in labels if k[0] not in ('instance', 'job')), value) for labels, value in scraped.items())
    wanted = samples(exposition)
    prometheus.difference = ('only in Prometheus: %s; only in the file: %s' % (
        sorted(set(found.items()) - set(wanted.items()))[:5], sorted(set(wanted.items()) - set(found.items()))[:5]))
    return found if found == wanted else None


def check_metrics(binaries, exposition):
    result = subprocess.run([binaries['promtool'], 'check', 'metrics'], input=exposition, universal_newlines=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, check=False)
    return result.returncode, result.stdout


def unit_command(path):
    """ExecStart (split) and Environment= of a systemd unit the role wrote, as systemd would run it."""
    with open(path) as handle:
        unit = handle.read()
    environment = dict(value.split('=', 1) for value in
                       (json.loads(quoted) for quoted in re.findall(r'(?m)^Environment=(".*")$', unit)))
    return shlex.split(re.search(r'(?m)^ExecStart=(.*)$', unit).group(1)), environment


def timer_period(path):
    with open(path) as handle:
        match = re.search(r'(?m)^OnUnitActiveSec=(\d+)(min|s)$', handle.read())
    return int(match.group(1)) * (60 if match.group(2) == 'min' else 1)


def report(request, line):
    capture = request.config.pluginmanager.getplugin('capturemanager')
    with capture.global_and_fixture_disabled():
        print(line)


def test_prometheus_scrapes_the_role_switch_and_failure_and_the_timer_refresh(prometheus_binaries, host, monitoring, request):
    prometheus = monitoring
    timings = []

    # ---- a layout switch through the role: daytime on MIG-off GPUs -------------------------------------------
    run = run_role(host, 'daytime')
    assert run.rc == 0 and run.changed == ['localhost'], run.describe()
    daytime = textfile(host)
    rc, output = check_metrics(prometheus_binaries, daytime)
    assert rc == 0, 'promtool check metrics on %s:\n%s' % (METRICS_FILE, output)
    scraped, seconds = wait_for(lambda: 'the daytime textfile in Prometheus: %s' % prometheus.difference,
                                lambda: in_prometheus(prometheus, daytime), START_TIMEOUT)
    timings.append('daytime scraped %.1f s after the role' % seconds)

    # What the file says is right in itself: 7 x 1g on the A100 and the H100, 4 x 1g on the A30, nothing for the
    # L40S, every GPU in the layout, nothing stranded or fragmented on a shipped layout.
    def value(name, **labels):
        matching = [v for k, v in scraped.items() if ('__name__', name) in k and set(labels.items()) <= k]
        assert len(matching) == 1, (name, labels, matching)
        return matching[0]
    for gpu, model, small, count in (('0', 'NVIDIA A100-SXM4-80GB', '1g.10gb', 7), ('1', 'NVIDIA H100 80GB HBM3', '1g.10gb', 7),
                                     ('2', 'NVIDIA A30', '1g.6gb', 4)):
        assert value('gpufleet_mig_gpu_instances', gpu=gpu, model=model, profile=small) == count
        assert value('gpufleet_mig_gpu_in_layout', gpu=gpu) == 1
        assert value('gpufleet_mig_mode_enabled', gpu=gpu) == 1
        assert value('gpufleet_mig_stranded_slices', gpu=gpu) == 0
        assert value('gpufleet_mig_fragmentation_ratio', gpu=gpu) == 0
        assert value('gpufleet_mig_busy_instances', gpu=gpu) == 0
        assert len([k for k in scraped if ('__name__', 'gpufleet_mig_instance_info') in k and ('gpu', gpu) in k]) == count
        # a full daytime GPU has room for no more instance of any profile
        placeable = [v for k, v in scraped.items() if ('__name__', 'gpufleet_mig_placeable_instances') in k and ('gpu', gpu) in k]
        assert placeable and set(placeable) == {0}, placeable
        assert value('gpufleet_mig_placeable_instances', gpu=gpu, profile=small) == 0
    assert not [k for k in scraped if ('gpu', '3') in k], 'the L40S has no MIG, so no metrics'
    assert value('gpufleet_mig_layout_info', layout='daytime') == 1
    assert value('gpufleet_mig_layout_last_apply_success', layout='daytime', source='ansible') == 1

    # node_exporter serves the same lines: promtool accepts them too, and the textfile collector read it.
    served = http_get(prometheus.exporter)
    ours = '\n'.join(line for line in served.splitlines() if re.match(r'^(# (HELP|TYPE) )?gpufleet_mig_', line)) + '\n'
    rc, output = check_metrics(prometheus_binaries, ours)
    assert rc == 0, 'promtool check metrics on what node_exporter serves:\n%s' % output
    assert 'node_textfile_scrape_error 0' in served
    # MigMetricsStale's selector finds the file's modification time as this node_exporter labels it.
    stale_rule = [rule for rule in shipped_rules() if rule.get('alert') == 'MigMetricsStale'][0]
    selector = re.search(r'node_textfile_mtime_seconds\{[^}]*\}', stale_rule['expr']).group(0)
    assert [dict(labels)['file'] for labels in prometheus.query(selector)] == [os.path.join(host['metrics'], METRICS_FILE)]

    # The shipped rules are loaded and healthy, the recording rules count the fleet, and no alert is active.
    groups = prometheus.api('rules')['groups']
    assert sorted(g['name'] for g in groups) == ['gpufleet-mig-alerts', 'gpufleet-mig-fleet', 'gpufleet-mig-slice-gate']
    assert [r['name'] for g in groups for r in g['rules'] if r['health'] != 'ok'] == []
    in_layout, dummy = prometheus.wait('the recording rules', 'layout:gpufleet_mig_gpus_in_layout:sum', bool)
    assert in_layout == {frozenset({('layout', 'daytime')}): 3}
    assert prometheus.query('model_profile_state:gpufleet_mig_instances:count{state="idle"}') == {
        frozenset({('model', 'NVIDIA A100-SXM4-80GB'), ('profile', '1g.10gb'), ('state', 'idle')}): 7,
        frozenset({('model', 'NVIDIA H100 80GB HBM3'), ('profile', '1g.10gb'), ('state', 'idle')}): 7,
        frozenset({('model', 'NVIDIA A30'), ('profile', '1g.6gb'), ('state', 'idle')}): 4}
    assert prometheus.api('alerts')['alerts'] == []

    # ---- a failed change: nighttime, and NVML fails creating GPU 0's first instance -------------------------------
    state = simulator.load_state(host['state'])
    state['faults'] = [{'call': 'nvmlDeviceCreateGpuInstanceWithPlacement', 'gpu': 0, 'error': 'NVML_ERROR_UNKNOWN'}]
    simulator.write_state(host['state'], state)
    run = run_role(host, 'nighttime')
    assert run.rc != 0 and run.failed == ['localhost'], run.describe()
    failed = textfile(host)
    assert 'gpufleet_mig_layout_last_apply_success{layout="nighttime",source="ansible"} 0' in failed, failed
    rc, output = check_metrics(prometheus_binaries, failed)
    assert rc == 0, output
    firing, seconds = wait_for('MigLayoutApplyFailed firing', lambda: [
        alert for alert in prometheus.alerts('MigLayoutApplyFailed') if alert['state'] == 'firing'], START_TIMEOUT, prometheus.logs)
    timings.append('MigLayoutApplyFailed firing %.1f s after the role' % seconds)
    assert len(firing) == 1 and firing[0]['labels'] == {
        'alertname': 'MigLayoutApplyFailed', 'severity': 'critical', 'instance': prometheus.instance, 'job': JOB,
        'layout': 'nighttime', 'source': 'ansible'}
    assert firing[0]['annotations']['summary'] == 'MIG layout nighttime failed on %s (ansible apply)' % prometheus.instance
    pending = prometheus.alerts('MigGpuOutOfLayout')
    assert pending and set(alert['state'] for alert in pending) == {'pending'}, pending
    assert '0' in [alert['labels']['gpu'] for alert in pending], pending
    assert all(alert['labels']['layout'] == 'nighttime' for alert in pending), pending

    # ---- the metrics timer: what its service runs, after a process started on one of GPU 1's instances ---------
    argv, environment = unit_command(os.path.join(host['systemd'], 'gpufleet-mig-metrics.service'))
    period = timer_period(os.path.join(host['systemd'], 'gpufleet-mig-metrics.timer'))
    gi = simulator.load_state(host['state'])['gpus'][1]['gpu_instances'][0]
    simulator.set_pids(host['state'], 1, gi['id'], gi['compute_instances'][0]['id'], [4242])
    before = prometheus.query('node_textfile_mtime_seconds')
    # node_exporter gives the file's mtime in whole seconds: refresh in a later second than the last write, or a
    # quick machine writes both within one second and the mtime cannot show the refresh.
    time.sleep(max(0.0, max(before.values()) + 1 - time.time()))
    started = time.monotonic()
    subprocess.run(argv, env=dict(environment, PATH='/usr/bin:/bin'), check=True, timeout=60)
    refreshed = textfile(host)
    assert refreshed != failed and re.search(r'(?m)^gpufleet_mig_busy_instances\{gpu="1",.*\} 1$', refreshed), refreshed
    # The failed change declared nothing: the timer compares the GPUs with daytime, the failure stays recorded.
    assert 'gpufleet_mig_layout_info{layout="daytime"} 1' in refreshed, refreshed
    assert 'gpufleet_mig_layout_last_apply_success{layout="nighttime",source="ansible"} 0' in refreshed, refreshed
    dummy, seconds = wait_for(lambda: 'the refreshed textfile in Prometheus: %s' % prometheus.difference,
                              lambda: in_prometheus(prometheus, refreshed), period)
    seconds = time.monotonic() - started
    timings.append('timer refresh seen %.1f s after its command started (period %d s)' % (seconds, period))
    assert prometheus.query('node_textfile_mtime_seconds') != before
    busy, dummy = prometheus.wait('the busy instance in the recording rules',
                                  'model_profile_state:gpufleet_mig_instances:count{state="busy"}', bool, timeout=period)
    assert busy == {frozenset({('model', 'NVIDIA H100 80GB HBM3'), ('profile', gi['profile']), ('state', 'busy')}): 1}
    assert prometheus.alerts('MigMetricsStale') == []
    report(request, 'prometheus scrape: ' + '; '.join(timings))

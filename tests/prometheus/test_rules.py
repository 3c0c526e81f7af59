# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped Prometheus rules (roles/mig_layout/files/prometheus/gpufleet-mig.rules.yml) under promtool.

- ``promtool check rules`` accepts the file;
- ``promtool test rules tests/prometheus/alerts_test.yml``: each alert on the series that should raise it;
- generated from the collection's own code (nvidia_mig_layout and the metrics timer on simulated hosts, the
  shipped catalog), so that a regression of the metrics' definitions breaks them: every shipped layout on every
  simulated model raises no alert, nor does a fleet mid-rollout; a GPU fragmented by churn raises MigFragmented
  and MigStrandedCapacity;
- the alert texts name host and GPU and link their section of docs/metrics.md, which points at the file.

Run: PYTHONPATH=build/collections .venv/bin/python -m pytest -q -p no:cacheprovider tests/prometheus
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import subprocess
import time

import pytest
import yaml

from ansible_collections.gpufleet.mig.tests.prometheus.fleet import REPO, RULES, SimulatedFleet, Timeline, parse_exposition, shipped_rules
import gpufleet_nvml_sim as simulator

ALERTS_TEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'alerts_test.yml')
METRICS_DOC = os.path.join(REPO, 'docs', 'metrics.md')
MIG_MODELS = sorted(key for key, model in simulator.MODELS.items() if model['mig_capable'])
WITHOUT_MIG = sorted(key for key, model in simulator.MODELS.items() if not model['mig_capable'])
# Alerts about one host as a whole: every other alert names a GPU.
HOST_ALERTS = ('MigLayoutApplyFailed', 'MigBootPersistenceFailed', 'MigMetricsStale')
POD_ALERTS = ('MigPodGatedTooLong',)


def rules():
    return shipped_rules()


def alerts():
    return [rule for rule in rules() if 'alert' in rule]


def promtool(binaries, *args):
    started = time.monotonic()
    result = subprocess.run([binaries['promtool']] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=300, check=False)
    print('promtool %s: %.1f s' % (args[0:2], time.monotonic() - started))
    return result.returncode, result.stdout


def run_rule_tests(binaries, directory, name, timeline, alert_tests, expr_tests=()):
    """One promtool unit test of the shipped rules on a Timeline's series, evaluated at each scrape; asserts that
    it passes."""
    input_series = timeline.input_series(directory)
    interval = '%dm' % timeline.step
    document = {
        'rule_files': [RULES],
        'evaluation_interval': interval,
        'tests': [{'name': name, 'interval': interval, 'input_series': input_series,
                   'alert_rule_test': list(alert_tests), 'promql_expr_test': list(expr_tests)}],
    }
    path = os.path.join(str(directory), '%s_test.yml' % re.sub(r'\W+', '_', name))
    with open(path, 'w') as handle:
        yaml.safe_dump(document, handle, sort_keys=False)
    rc, output = promtool(binaries, 'test', 'rules', path)
    assert rc == 0 and 'SUCCESS' in output, '%s (%d series, %d scrapes, %s):\n%s' % (
        name, len(input_series), timeline.steps, path, output[-6000:])


def silent(at):
    """No alert of the shipped file at any of the times ``at``."""
    return [{'eval_time': time_, 'alertname': rule['alert'], 'exp_alerts': []} for time_ in at for rule in alerts()]


def expect(expr, at, samples):
    """A promql_expr_test: ``expr`` at ``at`` gives exactly ``samples`` ({series: value})."""
    return {'expr': expr, 'eval_time': at,
            'exp_samples': [{'labels': labels, 'value': value} for labels, value in sorted(samples.items())]}


def every_gpu_model():
    return [{'model': model} for model in MIG_MODELS + WITHOUT_MIG]


# ---- the file itself ------------------------------------------------------------------------------------------

def test_promtool_accepts_the_shipped_rules(prometheus_binaries):
    rc, output = promtool(prometheus_binaries, 'check', 'rules', RULES)
    assert rc == 0, output
    assert 'SUCCESS: %d rules found' % len(rules()) in output, output


def test_the_alert_unit_tests_pass(prometheus_binaries):
    rc, output = promtool(prometheus_binaries, 'test', 'rules', ALERTS_TEST)
    assert rc == 0 and 'SUCCESS' in output, output


def test_every_rule_has_a_unit_test_that_expects_it():
    """Each alert fires in alerts_test.yml and each recorded series is checked there: a new rule needs a test."""
    with open(ALERTS_TEST) as handle:
        tests = yaml.safe_load(handle)['tests']
    firing = set(case['alertname'] for test in tests for case in test.get('alert_rule_test', []) if case['exp_alerts'])
    recorded = set(case['expr'] for test in tests for case in test.get('promql_expr_test', []) if case['exp_samples'])
    assert firing == set(rule['alert'] for rule in alerts())
    assert recorded == set(rule['record'] for rule in rules() if 'record' in rule)


def _anchor(heading):
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r'[^a-z0-9 _-]', '', heading.strip().lower()).replace(' ', '-')


def test_alert_texts_name_host_and_gpu_and_link_their_docs_section():
    with open(os.path.join(REPO, 'galaxy.yml')) as handle:
        documentation = yaml.safe_load(handle)['documentation'].rstrip('/')
    with open(METRICS_DOC) as handle:
        anchors = set(_anchor(line.lstrip('#')) for line in handle if line.startswith('#'))
    for rule in alerts():
        name, annotations = rule['alert'], rule['annotations']
        if name in POD_ALERTS:
            # kube-state-metrics' series of a pod: its namespace and name say which.
            assert all('{{ $labels.%s }}' % label in annotations[text] for label in ('namespace', 'pod')
                       for text in ('summary', 'description')), name
        else:
            assert '{{ $labels.instance }}' in annotations['summary'], name
            assert '{{ $labels.instance }}' in annotations['description'], name
        if name not in HOST_ALERTS + POD_ALERTS:
            assert '{{ $labels.gpu }}' in annotations['summary'] and '{{ $labels.uuid }}' in annotations['description'], name
        url = annotations['runbook_url']
        assert url == '%s/metrics.md#%s' % (documentation, name.lower()), name
        assert name.lower() in anchors, 'docs/metrics.md has no section %s for the runbook_url of %s' % (name, name)
        assert rule['labels']['severity'] in ('critical', 'warning', 'info'), name


def test_each_alert_section_of_the_docs_quotes_its_rule_as_shipped():
    """The section starts with the alert's expression, word for word, and says how long it must hold."""
    with open(METRICS_DOC) as handle:
        doc = handle.read()
    words = {'15m': '15 minutes', '1h': 'an hour', '6h': '6 hours', '5m': '5 minutes', '45m': '45 minutes'}
    for rule in alerts():
        section = doc.split('\n### %s\n' % rule['alert'], 1)[1].split('\n#', 1)[0]
        quoted = ' '.join(re.search(r'`([^`]+)`', section).group(1).split())
        assert quoted == ' '.join(rule['expr'].split()), rule['alert']
        held = words[rule['for']] if 'for' in rule else 'at once'
        assert held in ' '.join(section.split()), (rule['alert'], held)


def test_the_docs_point_at_the_rule_file_instead_of_repeating_it():
    with open(METRICS_DOC) as handle:
        doc = handle.read()
    assert 'roles/mig_layout/files/prometheus/gpufleet-mig.rules.yml' in doc
    assert not re.search(r'(?m)^\s*- (alert|record):', doc), 'docs/metrics.md repeats rules: link the rule file instead'
    for rule in rules():
        if 'record' in rule:
            assert '`%s`' % rule['record'] in doc, 'docs/metrics.md does not describe %s' % rule['record']
        else:
            assert '\n### %s\n' % rule['alert'] in doc, 'docs/metrics.md has no section for %s' % rule['alert']


# ---- series written by the collection's own code ---------------------------------------------------------------

@pytest.fixture
def fleet(tmp_path, run_module, monkeypatch):
    return SimulatedFleet(tmp_path / 'hosts', run_module, monkeypatch)


def test_every_shipped_layout_on_every_model_raises_no_alert(prometheus_binaries, fleet, tmp_path):
    """One host per shipped layout, each with one GPU of every simulated model, for 7 hours: no alert, nothing
    stranded or fragmented, every GPU in its layout (an optimally used GPU scores 0, whatever its model)."""
    timeline = Timeline(minutes=7 * 60, step=5)
    for layout in sorted(fleet.catalog):
        host = fleet.host(layout, every_gpu_model())
        assert host.apply(layout)['in_layout'], layout
        timeline.show(layout, 0, host.metrics())
    run_rule_tests(prometheus_binaries, tmp_path, 'every shipped layout on every model', timeline,
                   silent(['30m', '6h30m', '7h']), [
                       expect('max(gpufleet_mig_stranded_slices)', '1h', {'{}': 0}),
                       expect('max(gpufleet_mig_fragmentation_ratio)', '1h', {'{}': 0}),
                       expect('sum(model:gpufleet_mig_stranded_slice_hours:increase1d)', '7h', {'{}': 0}),
                       expect('sum(layout:gpufleet_mig_gpus_out_of_layout:sum)', '1h', {'{}': 0}),
                       expect('layout:gpufleet_mig_gpus_unmatched:sum', '1h', {}),
                       expect('count(count by (model) (gpufleet_mig_mode_enabled))', '1h', {'{}': len(MIG_MODELS)}),
                       expect('layout:gpufleet_mig_gpus_in_layout:sum', '1h', dict(
                           ('layout:gpufleet_mig_gpus_in_layout:sum{layout="%s"}' % layout, len(MIG_MODELS))
                           for layout in fleet.catalog)),
                   ])


def test_a_fleet_mid_rollout_within_its_budget_raises_no_alert(prometheus_binaries, fleet, tmp_path):
    """daytime -> nighttime, one host at a time (serial 1), 30 minutes per host: a host switched before the series
    start, one switched 30 minutes in, one 60 minutes in. A host's metrics keep its previous layout until its apply
    succeeds, so no GPU is ever out of its layout."""
    models = [{'model': model} for model in ('A100-SXM4-80GB', 'A30', 'H100-SXM5-80GB', 'H200', 'L40S')]
    timeline = Timeline(minutes=3 * 60)
    hosts = [fleet.host(name, models) for name in ('first', 'second', 'third')]
    for host in hosts:
        host.apply('daytime')
        timeline.show(host.name, 0, host.metrics())
    for minute, host in ((0, hosts[0]), (30, hosts[1]), (60, hosts[2])):
        assert not host.decide('nighttime')['in_layout']
        assert host.apply('nighttime')['in_layout']
        timeline.show(host.name, minute, host.metrics())
    run_rule_tests(prometheus_binaries, tmp_path, 'a fleet mid-rollout', timeline, silent(['35m', '65m', '3h']), [
        expect('layout:gpufleet_mig_hosts:count', '45m', {
            'layout:gpufleet_mig_hosts:count{layout="daytime"}': 1,
            'layout:gpufleet_mig_hosts:count{layout="nighttime"}': 2}),
        expect('sum(layout:gpufleet_mig_gpus_out_of_layout:sum)', '45m', {'{}': 0}),
        expect('layout:gpufleet_mig_gpus_in_layout:sum', '45m', {
            'layout:gpufleet_mig_gpus_in_layout:sum{layout="daytime"}': 4,
            'layout:gpufleet_mig_gpus_in_layout:sum{layout="nighttime"}': 8}),
    ])


def test_a_gpu_fragmented_by_churn_raises_mig_fragmented_and_stranded_capacity(prometheus_binaries, fleet, tmp_path):
    """Two A100s in a custom layout of three 1g instances: GPU 1 holds them as the module placed them; on GPU 0
    pods came and went and left them at slices 0, 3 and 6 (written into the simulated GPU, then read by the
    metrics timer's command): slice 7 is free and unusable, and a 2g is the largest that fits, where the same three
    instances, packed, would leave room for a 4g."""
    fleet.catalog['three-small'] = [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g': 3}}]
    host = fleet.host('churned', [{'model': 'A100-SXM4-80GB'}, {'model': 'A100-SXM4-80GB'}])
    host.apply('three-small')
    host.edit_state(lambda state: state['gpus'][0].update(gpu_instances=[
        {'profile': '1g.10gb', 'start': start, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for start in (0, 3, 6)]))
    host.refresh()
    metrics = host.metrics()
    figures = dict(((name, labels['gpu']), value) for name, labels, value in parse_exposition(metrics) if 'gpu' in labels)
    assert figures[('gpufleet_mig_gpu_in_layout', '0')] == 1, 'the churned GPU still holds its two instances:\n' + metrics
    assert figures[('gpufleet_mig_stranded_slices', '0')] > 0 and figures[('gpufleet_mig_fragmentation_ratio', '0')] >= 0.5, metrics
    assert figures[('gpufleet_mig_stranded_slices', '1')] == 0 and figures[('gpufleet_mig_fragmentation_ratio', '1')] == 0, metrics
    timeline = Timeline(minutes=14 * 60)
    timeline.show('churned', 0, metrics)
    uuid = [labels['uuid'] for name, labels, value in parse_exposition(metrics) if labels.get('gpu') == '0'][0]
    gpu0 = 'instance="churned:9100",job="node",gpu="0",model="NVIDIA A100-SXM4-80GB",severity="info",uuid="%s"' % uuid

    def firing(alert, at, expected):
        """ALERTS of ``alert`` at ``at``: only GPU 0's, or none (``expected`` False)."""
        series = 'ALERTS{alertname="%s",alertstate="firing",%s}' % (alert, gpu0)
        return expect('ALERTS{alertname="%s",alertstate="firing"}' % alert, at, {series: 1} if expected else {})
    # MigStrandedCapacity fires past 12 slice-hours: after 12 / stranded hours.
    fires_after = int(12.0 * 60 / figures[('gpufleet_mig_stranded_slices', '0')])
    run_rule_tests(prometheus_binaries, tmp_path, 'a GPU fragmented by churn', timeline, [
        {'eval_time': '14h', 'alertname': alert, 'exp_alerts': []}
        for alert in ('MigLayoutApplyFailed', 'MigGpuOutOfLayout', 'MigGpuUnmatched', 'MigMetricsStale')], [
        firing('MigFragmented', '5h59m', False),
        firing('MigFragmented', '6h1m', True),
        firing('MigStrandedCapacity', '%dm' % (fires_after - 2), False),
        firing('MigStrandedCapacity', '%dm' % (fires_after + 2), True),
    ])


def test_a_refused_apply_then_a_no_op_run_resolves_mig_layout_apply_failed(prometheus_binaries, fleet, tmp_path):
    """A host in nighttime refuses daytime (a process on an instance daytime destroys): MigLayoutApplyFailed fires.
    The next run of nighttime changes nothing (the role's decision, apply: false) and resolves it, on the series the
    module itself writes."""
    busy = [{'model': 'H100-SXM5-80GB', 'mig': {'current': 'enabled', 'pending': 'enabled'}}]
    host = fleet.host('refused', busy)
    assert host.apply('nighttime')['in_layout']
    host.edit_state(lambda state: state['gpus'][0]['gpu_instances'][0]['compute_instances'][0].update(pids=[77]))
    with pytest.raises(AssertionError, match=r'\[77\]'):
        host.apply('daytime')
    timeline = Timeline(minutes=30)
    timeline.show('refused', 0, host.metrics())
    assert host.decide('nighttime')['in_layout']
    timeline.show('refused', 10, host.metrics())
    labels = 'instance="refused:9100",job="node",layout="%s",severity="critical",source="ansible"'

    def firing(at, layout):
        series = {'ALERTS{alertname="MigLayoutApplyFailed",alertstate="firing",%s}' % (labels % layout): 1} if layout else {}
        return expect('ALERTS{alertname="MigLayoutApplyFailed",alertstate="firing"}', at, series)
    run_rule_tests(prometheus_binaries, tmp_path, 'a refused apply then a no-op run', timeline, [], [
        firing('5m', 'daytime'), firing('12m', None), firing('30m', None)])

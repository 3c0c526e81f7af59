# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout advisor against a real Prometheus: two generated weeks of kube-state-metrics' series backfilled with
``promtool tsdb create-blocks-from openmetrics``, playbooks/mig_advise.yml run against its HTTP API on a simulated
host (one GPU of each of four models), and the catalog it wrote replayed with benchmarks/demand.py's Replay.

- A week whose demand the shipped ``all-balanced`` serves (1g, 2g and 3g only, light): the advice places at least
  as many requests as the shipped catalog.
- A week of 4g and double-memory 1g requests, which all-balanced cannot serve: the advice places strictly more.

benchmarks/advisor.py gives the figures on benchmarks/demand.py's own mix over several weeks (docs/advisor.md).

Run: PYTHONPATH=build/collections .venv/bin/python -m pytest -q -p no:cacheprovider tests/prometheus/test_advise.py
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import random
import subprocess
import sys
import time

import pytest
import yaml

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_demand import sanitized
from ansible_collections.gpufleet.mig.tests.prometheus.fleet import REPO
from ansible_collections.gpufleet.mig.tests.prometheus.test_scrape import START_TIMEOUT, Daemon, free_port, http_get, wait_for
from ansible_collections.gpufleet.mig.tests.support.playbook import ansible_environment, run_playbook
from ansible_collections.gpufleet.mig.tests.support.simulator import simulated_environment
import gpufleet_nvml_sim as simulator

sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
import advisor as bench  # noqa: E402  benchmarks/advisor.py: the advised schedule replayed
# benchmarks/demand.py's request stream and replay
from demand_baselines import StaticLayout  # noqa: E402
from demand_replay import figures  # noqa: E402
from demand_shipped import RUN_SECONDS  # noqa: E402
from demand_workload import MODELS, Request, shape_profiles, shipped_layouts  # noqa: E402

DAY = 86400
DAYS = 7
SAMPLE_SECONDS = 300      # kube-state-metrics scraped every 5 minutes
PLAYBOOK = os.path.join(REPO, 'playbooks', 'mig_advise.yml')


# (compute slices, memory slices) -> pods at once at most, per model
SERVED = (((1, 1), 2), ((2, 2), 1), ((3, 4), 1))      # all-balanced: 2x1g + 2g + 3g
UNSERVED = (((1, 2), 1), ((4, 4), 1))                  # all-balanced has neither


def generated_week(seed, mix):
    """A week of requests per model, each shape of ``mix`` asked by at most its number of pods at once (one after
    the other, 30 min to 2 h each, 10 min to 1 h apart)."""
    rng = random.Random(seed)
    requests = []
    shapes = shape_profiles()
    for model in MODELS:
        for shape, slots in mix:
            for slot in range(slots):
                now = rng.uniform(0, 3600)
                while now < DAYS * DAY:
                    hold = rng.uniform(1800, 7200)
                    requests.append(Request(0, now, min(hold, DAYS * DAY - now - 1), shapes[model][shape]))
                    now += hold + rng.uniform(600, 3600)
    requests.sort(key=lambda r: r.arrival)
    for number, request in enumerate(requests):
        request.number = number
    return requests


def openmetrics(weeks):
    """kube-state-metrics' series for every pod of ``weeks`` ([(start, requests)]), one sample every SAMPLE_SECONDS
    while it exists, each request's pod in one of the forms kube-scheduler counts as one device (its request is
    max(sum of containers + native sidecars, the most any init container asks)): request number % 4 is
    0 one container; 1 two containers, the second asking for no GPU, and an init container asking for the same
    device (max, not sum); 2 the device held by a native sidecar (an init container with restartPolicy Always) beside
    a container without a GPU; 3 Pending for its first sample, then Running. Beside every third request, a pod of the
    same request that Succeeded and one that Failed, which are no demand."""
    lines = dict((name, []) for name in ('kube_pod_container_resource_requests', 'kube_pod_init_container_resource_requests',
                                         'kube_pod_init_container_info', 'kube_pod_status_phase'))

    def pod_series(pod, resource, stamps, form, phases):
        labels = 'namespace="bench",pod="%s",uid="u%s"' % (pod, pod)
        for t in stamps:
            if form in (0, 1, 3):
                lines['kube_pod_container_resource_requests'].append(
                    'kube_pod_container_resource_requests{%s,container="main",node="gpu-node",resource="%s",unit="integer"} 1 %d'
                    % (labels, resource, t))
            if form in (1, 2):
                lines['kube_pod_container_resource_requests'].append(
                    'kube_pod_container_resource_requests{%s,container="helper",node="gpu-node",resource="cpu",unit="core"} 0.5 %d'
                    % (labels, t))
            if form in (1, 2):
                init = 'warmup' if form == 1 else 'holder'
                lines['kube_pod_init_container_resource_requests'].append(
                    'kube_pod_init_container_resource_requests{%s,container="%s",node="gpu-node",resource="%s",unit="integer"} 1 %d'
                    % (labels, init, resource, t))
                lines['kube_pod_init_container_info'].append(
                    'kube_pod_init_container_info{%s,container="%s",image="x",image_spec="x",image_id="",container_id="",'
                    'restart_policy="%s"} 1 %d' % (labels, init, 'Always' if form == 2 else '', t))
            for phase in ('Pending', 'Running', 'Succeeded', 'Failed'):
                lines['kube_pod_status_phase'].append('kube_pod_status_phase{%s,phase="%s"} %d %d'
                                                      % (labels, phase, 1 if phases(t) == phase else 0, t))

    for number, (start, requests) in enumerate(weeks):
        for request in requests:
            pod = 'w%d-pod-%d' % (number, request.number)
            begin = start + request.arrival
            stamps = [begin + k * SAMPLE_SECONDS for k in range(int(request.hold // SAMPLE_SECONDS) + 1)]
            resource = sanitized('nvidia.com/mig-' + request.profile)
            form = request.number % 4
            pod_series(pod, resource, stamps, form,
                       lambda t, first=stamps[0], form=form: 'Pending' if form == 3 and t == first else 'Running')
            if request.number % 3 == 0:
                for phase in ('Succeeded', 'Failed'):
                    pod_series('%s-%s' % (pod, phase.lower()), resource, stamps, 0, lambda t, phase=phase: phase)
    result = []
    for name, samples in lines.items():
        result.append('# TYPE %s gauge' % name)
        result.extend(samples)
    return '\n'.join(result + ['# EOF']) + '\n'


@pytest.fixture(scope='module')
def backfilled(prometheus_binaries, tmp_path_factory):
    """Prometheus on a loopback port over a TSDB backfilled with two weeks ending at the last UTC midnight: the
    served week, then the unserved one. Yields (url, {week: (end, requests)}); always stopped."""
    root = tmp_path_factory.mktemp('advise')
    end = (int(time.time()) // DAY) * DAY
    weeks = {'served': (end - 2 * DAYS * DAY, generated_week('advise-served', SERVED)),
             'unserved': (end - DAYS * DAY, generated_week('advise-unserved', UNSERVED))}
    source = root / 'demand.om'
    source.write_text(openmetrics(list(weeks.values())))
    subprocess.run([prometheus_binaries['promtool'], 'tsdb', 'create-blocks-from', 'openmetrics', str(source), str(root / 'tsdb')],
                   check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    config = root / 'prometheus.yml'
    config.write_text(yaml.safe_dump({'global': {'scrape_interval': '15s'}, 'scrape_configs': []}))
    port = free_port()
    daemon = Daemon('prometheus', [prometheus_binaries['prometheus'], '--config.file=%s' % config,
                                   '--storage.tsdb.path=%s' % (root / 'tsdb'), '--storage.tsdb.retention.time=30d',
                                   '--web.listen-address=127.0.0.1:%d' % port], str(root))
    try:
        url = 'http://127.0.0.1:%d' % port
        wait_for('Prometheus ready', lambda: 'Ready' in http_get(url + '/-/ready'), START_TIMEOUT, [daemon.log])
        yield url, dict((name, (start + DAYS * DAY, requests)) for name, (start, requests) in weeks.items()), root
    finally:
        daemon.stop()


def advise(url, end, root, name):
    """playbooks/mig_advise.yml on a simulated host with one GPU of each model; returns (run, catalog, awx vars)."""
    state = root / ('gpus-%s.json' % name)
    simulator.write_state(str(state), {'driver_version': '580.95.05', 'gpus': [
        {'model': model, 'mig': {'current': 'enabled', 'pending': 'enabled'}} for model in MODELS]})
    catalog, awx = root / ('catalog-%s.yml' % name), root / ('awx-%s.yml' % name)
    extravars = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable, 'mig_layout_hosts': 'localhost',
                 'mig_layout_boot_environment': simulated_environment(str(state)), 'mig_layout_config_dir': str(root / 'etc'),
                 'mig_advise_prometheus_url': url, 'mig_advise_end': end, 'mig_advise_days': DAYS,
                 'mig_advise_current': 'all-balanced', 'mig_advise_catalog_path': str(catalog), 'mig_advise_awx_vars_path': str(awx)}
    run = run_playbook(PLAYBOOK, inventory='localhost,', extravars=extravars, envvars=ansible_environment(), project_dir=REPO,
                       timeout=300)
    assert run.rc == 0, run.describe()
    if not catalog.exists() and not awx.exists():
        return run, None, None
    with open(str(catalog)) as handle, open(str(awx)) as awx_handle:
        return run, yaml.safe_load(handle), yaml.safe_load(awx_handle)


def replayed(requests, document, switches):
    """Requests placed over the week by the shipped all-balanced and by the advised catalog at its switch hours."""
    options = bench.replay_options(bench.argparse.Namespace(gpus=1, patience=30.0, run_seconds=RUN_SECONDS), DAYS)
    options.hours = DAYS * 24.0
    layouts = bench.targets(document, 1)
    hours = sorted(int(s['time'].split(':')[0]) for s in switches)
    shipped = figures(StaticLayout(requests, options, 'advise', shipped_layouts()['all-balanced']).run())
    advised = figures(bench.AdvisedSchedule(requests, options, 'advise', layouts, hours).run())
    return shipped['placed'], advised['placed']


@pytest.mark.parametrize('week, strictly', [('served', False), ('unserved', True)])
def test_the_advice_read_from_prometheus_places_at_least_what_the_shipped_catalog_does(backfilled, week, strictly):
    url, weeks, root = backfilled
    end, requests = weeks[week]
    run, document, awx = advise(url, end, root, week)
    advice = run.task_results('Advise')['localhost']['ansible_facts']['mig_advise']
    # the whole week came back from Prometheus, for every model
    assert advice['days'] == DAYS and len(advice['models']) == len(MODELS)
    assert all(model['requested'] > 0 for model in advice['models'])
    print('%s week: %s' % (week, ' | '.join(advice['summary'])))
    # every request's pod counted once, whatever its containers, init containers and sidecars; the pods that
    # Succeeded or Failed without running are no demand
    assert sum(advice['requests']['hostable'].values()) == len(requests)
    if not strictly:
        # all-balanced already serves this week: the replay finds nothing better, the advice is to keep it, and
        # no file is written
        assert advice['keep_current'] and document is None and awx is None
        return
    # the written catalog keeps the shipped layouts beside the advised ones, and the AWX switches name them
    assert {'all-balanced', 'daytime', 'nighttime'} <= set(document['mig-configs'])
    assert [s['layout'] for s in awx['awx_layout_switches']] == ['advised-%02d00' % h for h in advice['switch_hours']]
    assert all(model['switches'] <= 2 for model in advice['models'])
    shipped, advised = replayed(requests, document, awx['awx_layout_switches'])
    print('%s week: %d requests, shipped all-balanced placed %d, advised %d (switch hours %s)'
          % (week, len(requests), shipped, advised, advice['switch_hours']))
    assert advised > shipped if strictly else advised >= shipped

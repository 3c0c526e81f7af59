# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Planner benchmark: prints figures measured side by side in one run.

On a seeded corpus of transitions across every MIG model, with random busy instances,
compares gpufleet.mig's planner, a clear-all-and-recreate baseline (what mig-parted does: a GPU
whose counts already match is left alone, any other is cleared) and the brute-force minimum. Then times a no-op nvidia_mig_instance run on a simulated
8-GPU host and counts its NVML calls.

Run: make benchmark   (or: PYTHONPATH=build/collections .venv/bin/python benchmarks/planner.py)
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# The NVML simulator is a package of its own in the repository's simulator/ folder.
from ansible_collections.gpufleet.mig.tests.support.simulator import SIMULATOR_ENV, simulated_environment, simulator_on_path

gpufleet_nvml_sim = simulator_on_path()

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _nvml_backend  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError, plan_gpu  # noqa: E402
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import MIG_MODELS, model_gpu  # noqa: E402
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.oracle import (  # noqa: E402
    all_placements,
    brute_force_min_destroyed,
    counts_of,
    with_instances,
)


def corpus(size, seed):
    rng = random.Random(seed)
    placements = dict((model, sorted(all_placements(model_gpu(model)))) for model in MIG_MODELS)
    for number in range(size):
        model = MIG_MODELS[number % len(MIG_MODELS)]
        gpu = model_gpu(model)
        current = rng.choice(placements[model])
        state = with_instances(gpu, [(name, start, [2000 + i] if rng.random() < 0.25 else [])
                                     for i, (name, start) in enumerate(current)])
        target = counts_of(rng.choice([p for p in placements[model] if p]))
        yield model, state, target


def clear_all_baseline(state, target):
    """mig-parted: a GPU whose instance counts already match passes its assert and is left alone;
    any other is cleared of every instance, then the layout is created."""
    if counts_of((gi.profile, gi.start) for gi in state.gpu_instances) == target:
        return 0
    busy = [gi for gi in state.gpu_instances if gi.busy]
    if busy:
        return None  # reaching the target means killing busy instances
    return len(state.gpu_instances)


def mean(values):
    return statistics.mean(values) if values else 0.0


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def bench_planner(size, seed):
    ours_reached = baseline_reached = oracle_reached = 0
    ours_destroyed = []
    baseline_destroyed = []
    oracle_destroyed = []
    times = []
    mismatches = 0
    for dummy, state, target in corpus(size, seed):
        minimum = brute_force_min_destroyed(state, target)
        if minimum is not None:
            oracle_reached += 1
            oracle_destroyed.append(minimum)
        started = time.perf_counter()
        try:
            plan = plan_gpu(state, target)
        except PlanningError:
            plan = None
        times.append(time.perf_counter() - started)
        if plan is not None:
            ours_reached += 1
            destroyed = len([a for a in plan.actions if a['action'] == 'destroy_gpu_instance'])
            ours_destroyed.append(destroyed)
            mismatches += minimum != destroyed
        else:
            mismatches += minimum is not None
        cleared = clear_all_baseline(state, target)
        if cleared is not None:
            baseline_reached += 1
            baseline_destroyed.append(cleared)
    print('Planner corpus: %d transitions over %d models (seed %s), 25%% of instances busy' % (size, len(MIG_MODELS), seed))
    print('%-34s %12s %12s %12s' % ('', 'gpufleet', 'clear-all', 'brute-force'))
    reached = (100.0 * ours_reached / size, 100.0 * baseline_reached / size, 100.0 * oracle_reached / size)
    print('%-34s %11.1f%% %11.1f%% %11.1f%%' % (('reached without touching busy',) + reached))
    print('%-34s %12.2f %12.2f %12.2f' % ('idle GIs destroyed / transition', mean(ours_destroyed), mean(baseline_destroyed),
                                          mean(oracle_destroyed)))
    print('%-34s %12d' % ('transitions differing from minimum', mismatches))
    print('planning time per GPU: median %.2f ms, p99 %.2f ms, max %.2f ms' % (
        1000 * statistics.median(times), 1000 * percentile(times, 0.99), 1000 * max(times)))


def bench_noop_module(gpus):
    """Wall time and NVML calls of a no-op nvidia_mig_instance run on a simulated host."""
    directory = tempfile.mkdtemp(prefix='gpufleet-bench-')
    try:
        state_path = os.path.join(directory, 'host.json')
        layout = [{'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in range(7)]
        with open(state_path, 'w') as handle:
            json.dump({'gpus': [{'model': 'A100-SXM4-80GB', 'mig': {'current': 'enabled', 'pending': 'enabled'},
                                 'gpu_instances': layout} for dummy in range(gpus)]}, handle)
        os.environ[SIMULATOR_ENV] = state_path
        counted = {}
        original = _nvml_backend.pynvml._nvmlGetFunctionPointer

        def counting(name):
            function = original(name)

            def call(*args):
                counted[name] = counted.get(name, 0) + 1
                return function(*args)
            return call
        _nvml_backend.pynvml._nvmlGetFunctionPointer = counting
        _nvml_backend.pynvml._nvmlGetFunctionPointer_cache.clear()
        runs = []
        try:
            for dummy in range(5):
                counted.clear()
                started = time.perf_counter()
                backend = _nvml_backend.NvmlBackend()
                host = backend.read_host()
                plans = [plan_gpu(gpu, {'1g.10gb': 7}) for gpu in host.gpus]
                backend.close()
                runs.append(time.perf_counter() - started)
                assert not any(p.changed for p in plans)
        finally:
            _nvml_backend.pynvml._nvmlGetFunctionPointer = original
            _nvml_backend.pynvml._nvmlGetFunctionPointer_cache.clear()
        mutating = sum(count for name, count in counted.items() if name in gpufleet_nvml_sim.MUTATING_CALLS)
        print('no-op nvidia_mig_instance core on a simulated %d-GPU host (7x1g.10gb each): median %.1f ms, %d NVML calls, '
              '%d mutating' % (gpus, 1000 * statistics.median(runs), sum(counted.values()), mutating))
        bench_noop_ansible(state_path, gpus)
    finally:
        os.environ.pop(SIMULATOR_ENV, None)
        shutil.rmtree(directory)


def bench_noop_ansible(state_path, gpus):
    """The same no-op as a whole ``ansible`` ad-hoc run (module packaging and transfer included)."""
    ansible = os.path.join(os.path.dirname(sys.executable), 'ansible')
    if not os.path.exists(ansible):
        print('ansible not found beside %s: whole-run figure skipped' % sys.executable)
        return
    command = [ansible, 'localhost', '-c', 'local', '-e', 'ansible_python_interpreter=%s' % sys.executable,
               '-m', 'gpufleet.mig.nvidia_mig_instance', '-a', '{"gpus": ["all"], "instances": {"1g.10gb": 7}}']
    environment = dict(os.environ, ANSIBLE_LOCALHOST_WARNING='false', ANSIBLE_INVENTORY_UNPARSED_WARNING='false',
                       **simulated_environment(state_path))
    runs = []
    for dummy in range(3):
        started = time.perf_counter()
        output = subprocess.run(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        runs.append(time.perf_counter() - started)
        if output.returncode != 0 or b'localhost | SUCCESS' not in output.stdout:
            raise SystemExit('no-op ansible run failed or changed something:\n%s' % output.stdout.decode())
    print('no-op ansible ad-hoc run of nvidia_mig_instance on the same %d-GPU host: median %.2f s wall' % (gpus, statistics.median(runs)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--transitions', type=int, default=1000)
    parser.add_argument('--seed', default='gpufleet-1')
    parser.add_argument('--gpus', type=int, default=8)
    args = parser.parse_args(argv)
    bench_planner(args.transitions, args.seed)
    bench_noop_module(args.gpus)
    return 0


if __name__ == '__main__':
    sys.exit(main())

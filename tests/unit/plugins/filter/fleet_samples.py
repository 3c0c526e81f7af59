# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host records for the fleet map tests: GPUs read through the simulator and turned into facts by nvidia_mig_facts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gpufleet.mig.plugins.modules.nvidia_mig_facts import gpu_facts
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import read_simulated_host


def simulated_gpu(model, instances=(), mig='enabled', pending=None, pids=(), uuid=None):
    """One GPU spec of a simulator state file. ``instances``: (profile, start, pids) with a full-size compute instance."""
    gpu = {'model': model, 'mig': {'current': mig, 'pending': pending or mig}, 'pids': list(pids),
           'gpu_instances': [{'profile': profile, 'start': start,
                              'compute_instances': [{'profile': profile, 'start': 0, 'pids': list(gi_pids)}]}
                             for profile, start, gi_pids in instances]}
    if uuid:
        gpu['uuid'] = uuid
    return gpu


def host_gpus(specs, in_layout=None, allocations=None, whole_gpu_pods=None):
    """nvidia_mig_facts GPUs of one simulated host.

    ``in_layout``: {GPU index: bool or None}; ``allocations``: {(GPU index, placement start): [pods]};
    ``whole_gpu_pods``: {GPU index: [pods]}. A pod is a dict (see pod()) or a 'namespace/pod' string
    as nvidia_mig_facts writes it.
    """
    gpus = [gpu_facts(gpu) for gpu in read_simulated_host(list(specs)).gpus]
    for gpu in gpus:
        if in_layout is not None:
            gpu['in_layout'] = in_layout.get(gpu['index'])
        if whole_gpu_pods and gpu['index'] in whole_gpu_pods:
            gpu['allocated_to'] = whole_gpu_pods[gpu['index']]
        for gi in gpu['gpu_instances']:
            pods = (allocations or {}).get((gpu['index'], gi['placement']['start']))
            if pods:
                gi['allocated_to'] = pods
    return gpus


def pod(namespace, name, container='main'):
    return {'namespace': namespace, 'pod': name, 'container': container}


def sample_fleet():
    """Several hosts and models: busy, allocated and idle instances, stranded slices, MIG disabled, no MIG."""
    return [
        {'host': 'gpu-a100-01', 'layout': 'daytime', 'gpus': host_gpus(
            [simulated_gpu('A100-SXM4-80GB', [('3g.40gb', 0, [4242]), ('1g.10gb', 6, []), ('1g.10gb', 4, [])]),
             simulated_gpu('A100-SXM4-80GB', [('1g.10gb', s, []) for s in range(7)]),
             simulated_gpu('A100-SXM4-80GB', mig='disabled', pending='enabled', pids=[77])],
            in_layout={0: True, 1: True, 2: False},
            allocations={(0, 6): [pod('ml-serving', 'llm-small-7f9c', 'server')], (1, 0): [pod('team-a', 'notebook-1')]})},
        {'host': 'gpu-h100-01', 'layout': 'daytime', 'gpus': host_gpus(
            [simulated_gpu('H100-SXM5-80GB', [('2g.20gb', 0, [1001, 1002]), ('1g.10gb', 2, []), ('1g.10gb', 5, [])]),
             simulated_gpu('H100-SXM5-80GB', [('7g.80gb', 0, [555])])],
            in_layout={0: False, 1: True},
            allocations={(0, 0): [pod('research', 'train-job-0', 'trainer')], (1, 0): [pod('research', 'pretrain-big')]})},
        {'host': 'gpu-a30-01', 'layout': 'nighttime', 'gpus': host_gpus(
            [simulated_gpu('A30', [('2g.12gb', 2, [31]), ('1g.6gb', 0, [])]),
             simulated_gpu('A30')],
            in_layout={0: True, 1: None})},
        {'host': 'gpu-h200-01', 'layout': None, 'gpus': host_gpus(
            [simulated_gpu('H200', [('1g.18gb', 6, []), ('1g.18gb', 4, []), ('1g.18gb', 5, [])])],
            allocations={(0, 4): ['batch/etl-17']})},
        {'host': 'inference-l40s-01', 'layout': None, 'gpus': host_gpus(
            [simulated_gpu('L40S', mig='disabled', pids=[900])], whole_gpu_pods={0: ['inference/vllm-0']})},
    ]


def large_fleet(hosts=1000, gpus_per_host=8):
    """``hosts`` A100-80GB hosts of ``gpus_per_host`` GPUs for the scale test: mostly the daytime layout with a pod on
    every instance, some nighttime, some churned, out of layout, MIG mode pending or busy during a pending switch."""
    daytime = [('1g.10gb', start, []) for start in range(7)]
    variants = host_gpus([
        simulated_gpu('A100-SXM4-80GB', daytime),
        simulated_gpu('A100-SXM4-80GB', [('3g.40gb', 0, [4100]), ('3g.40gb', 4, [])]),
        simulated_gpu('A100-SXM4-80GB', [('1g.10gb', 0, []), ('1g.10gb', 3, [4200]), ('1g.10gb', 6, [])]),
        simulated_gpu('A100-SXM4-80GB', [('2g.20gb', 0, [4300]), ('1g.10gb', 2, []), ('3g.40gb', 4, [])]),
        simulated_gpu('A100-SXM4-80GB', mig='disabled', pending='enabled', pids=[4400]),
    ])
    # per GPU position of a host: which variant, and whether it holds the declared layout
    pattern = [(0, True), (0, True), (0, True), (0, True), (1, False), (2, True), (3, None), (4, False)]
    fleet = []
    for host in range(hosts):
        gpus = []
        for index in range(gpus_per_host):
            variant, in_layout = pattern[(host + index) % len(pattern)] if host % 10 == 0 else (0, True)
            gpu = dict(variants[variant], gpu_instances=copy.deepcopy(variants[variant]['gpu_instances']))
            gpu['index'] = index
            gpu['uuid'] = 'GPU-%08x-%04x-%04x-%04x-%012x' % (host, index, 0xa100, 0x80, host * 64 + index)
            gpu['in_layout'] = in_layout
            for gi in gpu['gpu_instances']:
                gi['allocated_to'] = ['team-%d/inference-%05d-%d-%d' % (host % 17, host, index, gi['placement']['start'])]
            gpus.append(gpu)
        fleet.append({'host': 'gpu-node-%04d.dc1.example.com' % host, 'layout': 'daytime', 'gpus': gpus})
    return fleet

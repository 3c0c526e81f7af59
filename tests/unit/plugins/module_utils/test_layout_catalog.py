# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig-parted config validation, selection and per-GPU resolution of the mig_layout role."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpufleet.mig.plugins.module_utils import _nvml_backend
from gpufleet_nvml_sim.models import MODELS
from ansible_collections.gpufleet.mig.plugins.module_utils._layout_catalog import (
    LayoutConfigError,
    gpu_pods,
    module_groups,
    resolve,
    validate_configs,
    validate_document,
)

CATALOG = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'mig_layout', 'files', 'catalog.yml')

DAYTIME = {'A100-SXM4-40GB': {'1g.5gb': 7}, 'A100-SXM4-80GB': {'1g.10gb': 7}, 'A30': {'1g.6gb': 4},
           'H100-SXM5-80GB': {'1g.10gb': 7}, 'H100-NVL': {'1g.12gb': 7}, 'H200': {'1g.18gb': 7},
           'GH200-96GB': {'1g.12gb': 7}, 'B200': {'1g.23gb': 7}}
NIGHTTIME = {'A100-SXM4-40GB': {'3g.20gb': 2}, 'A100-SXM4-80GB': {'3g.40gb': 2}, 'A30': {'2g.12gb': 2},
             'H100-SXM5-80GB': {'3g.40gb': 2}, 'H100-NVL': {'3g.47gb': 2}, 'H200': {'3g.71gb': 2},
             'GH200-96GB': {'3g.48gb': 2}, 'B200': {'3g.90gb': 2}}


def load_catalog():
    with open(CATALOG) as handle:
        return validate_document(yaml.safe_load(handle))


def read_gpus(simulated_host, models, **extra):
    simulated_host([dict({'model': m}, **extra) for m in models])
    backend = _nvml_backend.NvmlBackend()
    try:
        return backend.read_host()['gpus']
    finally:
        backend.close()


@pytest.mark.parametrize('document, reason', [
    ({'version': 'v2', 'mig-configs': {'a': [{'devices': 'all', 'mig-enabled': False}]}}, 'unsupported mig-parted config version'),
    ({'version': 'v1', 'mig-configs': {}, 'extra': 1}, 'unknown top-level key'),
    ({'version': 'v1'}, 'no mig-configs'),
    ({'version': 'v1', 'mig-configs': {'a': [{'devices': 'all', 'mig-enabled': True, 'mig-device': {}}]}}, 'unknown key(s) mig-device'),
    ({'version': 'v1', 'mig-configs': {'a': [{'mig-enabled': True}]}}, 'devices is required'),
    ({'version': 'v1', 'mig-configs': {'a': [{'devices': [-1], 'mig-enabled': True}]}}, 'devices must be "all"'),
    ({'version': 'v1', 'mig-configs': {'a': [{'devices': 'all', 'mig-enabled': 'yes'}]}}, 'mig-enabled must be true or false'),
    ({'version': 'v1', 'mig-configs': {'a': [{'devices': 'all', 'device-filter': 'A100', 'mig-enabled': True}]}}, 'device-filter must be'),
    ({'version': 'v1', 'mig-configs': {'a': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': -1}}]}}, 'non-negative'),
    ({'version': 'v1', 'mig-configs': {'a': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'big': 1}}]}}, 'big'),
    ({'version': 'v1', 'mig-configs': {'a': [{'devices': 'all', 'mig-enabled': False, 'mig-devices': {'1g.10gb': 1}}]}}, 'need mig-enabled: true'),
    ({'version': 'v1', 'mig-configs': {'a': []}}, 'non-empty list'),
])
def test_invalid_documents_name_the_reason(document, reason):
    with pytest.raises(LayoutConfigError) as exc:
        validate_document(document)
    assert reason in str(exc.value)


def test_unquoted_pci_id_read_as_integer_is_accepted():
    configs = validate_configs({'a': [{'devices': 'all', 'device-filter': 0x20B210DE, 'mig-enabled': True}]})
    assert configs['a'][0]['device-filter'] == ['0x20B210DE']


def test_catalog_has_the_five_layouts_and_covers_every_mig_model():
    configs = load_catalog()
    assert sorted(configs) == ['all-balanced', 'all-disabled', 'all-enabled', 'daytime', 'nighttime']
    filters = set()
    for entry in configs['daytime']:
        filters.update(f.upper() for f in entry['device-filter'])
    capable = set('0X%08X' % m['pci_device_id'] for m in MODELS.values() if m['mig_capable'])
    assert capable <= filters


@pytest.mark.parametrize('name, expected', [('daytime', DAYTIME), ('nighttime', NIGHTTIME)])
def test_catalog_layouts_per_model_plan_on_the_simulated_gpus(simulated_host, name, expected):
    models = sorted(expected)
    gpus = read_gpus(simulated_host, models, mig={'current': 'enabled'})
    resolved = resolve(load_catalog(), name, gpus)
    by_index = dict((g['index'], g) for g in resolved['gpus'])
    for index, model in enumerate(models):
        assert by_index[index]['instances'] == expected[model], model
        assert by_index[index]['mig_enabled'] is True
        assert by_index[index]['in_layout'] is False
    assert resolved['in_layout'] is False


def test_balanced_plans_on_every_model(simulated_host):
    models = sorted(DAYTIME)
    gpus = read_gpus(simulated_host, models)
    resolved = resolve(load_catalog(), 'all-balanced', gpus)
    assert len(resolved['gpus']) == len(models)
    assert all(g['mode_in_layout'] is False for g in resolved['gpus'])


def test_gpu_without_mig_is_skipped_and_unmatched_gpu_fails(simulated_host):
    gpus = read_gpus(simulated_host, ['L40S', 'A30'])
    configs = validate_configs({'a100': [{'devices': 'all', 'device-filter': '0x20B210DE', 'mig-enabled': True}]})
    with pytest.raises(LayoutConfigError) as exc:
        resolve(configs, 'a100', gpus)
    assert 'GPU 1 (NVIDIA A30, 0x20B710DE) is matched by no entry' in str(exc.value)
    resolved = resolve(load_catalog(), 'all-disabled', gpus)
    assert [s['index'] for s in resolved['skipped']] == [0]
    assert [g['index'] for g in resolved['gpus']] == [1]
    assert resolved['in_layout'] is True


def test_unknown_name_and_ambiguous_match(simulated_host):
    gpus = read_gpus(simulated_host, ['A30'])
    configs = validate_configs({'x': [{'devices': 'all', 'mig-enabled': True}, {'devices': [0], 'mig-enabled': False}]})
    with pytest.raises(LayoutConfigError, match="layout 'nope' is not defined"):
        resolve(configs, 'nope', gpus)
    with pytest.raises(LayoutConfigError, match='matched by entries 0, 1'):
        resolve(configs, 'x', gpus)


def test_profile_the_model_does_not_offer_fails_before_anything(simulated_host):
    gpus = read_gpus(simulated_host, ['A30'], mig={'current': 'enabled'})
    configs = validate_configs({'x': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 1}}]})
    with pytest.raises(LayoutConfigError, match='1g.10gb is not offered'):
        resolve(configs, 'x', gpus)


def test_busy_instance_in_the_way_fails_and_in_layout_is_detected(simulated_host):
    busy = {'mig': {'current': 'enabled'}, 'gpu_instances': [
        {'profile': '1g.10gb', 'start': 0, 'compute_instances': [{'profile': '1g.10gb', 'start': 0, 'pids': [4242]}]}]}
    simulated_host([dict({'model': 'A100-SXM4-80GB'}, **busy)])
    backend = _nvml_backend.NvmlBackend()
    gpus = backend.read_host()['gpus']
    backend.close()
    with pytest.raises(LayoutConfigError, match=r'running processes \[4242\]'):
        resolve(load_catalog(), 'nighttime', gpus)
    configs = validate_configs({'one': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 1}}]})
    assert resolve(configs, 'one', gpus)['in_layout'] is True
    assert resolve(configs, 'one', gpus)['declared']['gpus'][0]['instances'] == {'1g.10gb': 1}


def test_module_groups_gather_identical_gpus():
    resolved = {'gpus': [
        {'uuid': 'GPU-a', 'mig_enabled': True, 'instances': {'1g.10gb': 7}},
        {'uuid': 'GPU-b', 'mig_enabled': False, 'instances': {}},
        {'uuid': 'GPU-c', 'mig_enabled': True, 'instances': {'1g.10gb': 7}},
    ]}
    assert module_groups(resolved) == [
        {'mig_enabled': True, 'instances': {'1g.10gb': 7}, 'gpus': ['GPU-a', 'GPU-c']},
        {'mig_enabled': False, 'instances': {}, 'gpus': ['GPU-b']},
    ]


def test_gpu_pods_selects_gpu_and_mig_requests_only():
    def pod(name, resources, owner=None, phase='Running', init=False):
        container = {'name': 'c', 'resources': resources}
        spec = {'initContainers': [container], 'containers': []} if init else {'containers': [container]}
        meta = {'name': name, 'namespace': 'team'}
        if owner:
            meta['ownerReferences'] = [{'kind': owner}]
        return {'metadata': meta, 'spec': spec, 'status': {'phase': phase}}
    pods = [
        pod('train', {'limits': {'nvidia.com/gpu': 1}}),
        pod('infer', {'requests': {'nvidia.com/mig-1g.10gb': 1}}, owner='ReplicaSet'),
        pod('init', {'requests': {'nvidia.com/mig-3g.40gb': 1}}, init=True),
        pod('cpu', {'requests': {'cpu': 1}}),
        pod('plugin', {'limits': {'nvidia.com/gpu': 1}}, owner='DaemonSet'),
        pod('done', {'limits': {'nvidia.com/gpu': 1}}, phase='Succeeded'),
    ]
    assert [p['name'] for p in gpu_pods(pods)] == ['infer', 'init', 'train']

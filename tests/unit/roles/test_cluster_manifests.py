# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Manifests of the device_plugin and gpu_tenancy roles, offline.

The roles run for real (ansible-playbook, render-only mode: no cluster) once
for all cases below, each case its own play so variables never leak between
cases. Every rendered object is validated against the Kubernetes 1.34 JSON
schemas shipped in the kubernetes-validate package (strict: unknown fields
fail), then checked for what the issue asks. Bad input must fail with a clear
message and render nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

K8S_VERSION = '1.34.0'
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))

TEAMS = [
    {'name': 'research', 'namespace': 'team-research', 'labels': {'cost-center': '4711'},
     'quota': {'nvidia.com/mig-2g.20gb': 4, 'nvidia.com/gpu': 2},
     'priority_class_quotas': {'training': {'nvidia.com/mig-3g.40gb': 1}}},
    {'name': 'serving', 'quota': {'nvidia.com/mig-1g.10gb': '7', 'requests.nvidia.com/mig-1g.10gb.me': 1}},
    {'name': 'no-quota'},
]
PRIORITY_OK = [{'name': 'training', 'value': 1000000000, 'preemption_policy': 'PreemptLowerPriority'},
               {'name': 'inference', 'value': 10, 'preemption_policy': 'Never', 'global_default': True}]

# name -> (roles to run, variables)
GOOD = {
    'defaults': (['device_plugin', 'gpu_tenancy'], {'gpu_tenancy_teams': TEAMS}),
    'config-changed': (['device_plugin'], {'device_plugin_fail_on_init_error': False}),
    'no-mig': (['device_plugin'], {'device_plugin_mig_strategy': 'none'}),
    'single-gfd-slicing': (['device_plugin'], {
        'device_plugin_mig_strategy': 'single', 'device_plugin_gfd_enabled': True,
        'device_plugin_time_slicing': [{'name': 'nvidia.com/gpu', 'replicas': 4}],
        'device_plugin_device_list_strategy': ['envvar', 'cdi-annotations'],
        'device_plugin_image_pull_secrets': ['ngc'], 'device_plugin_runtime_class_name': 'nvidia',
        'device_plugin_resources': {'requests': {'cpu': '50m', 'memory': '64Mi'}},
        'device_plugin_extra_tolerations': [{'key': 'dedicated', 'operator': 'Equal', 'value': 'gpu', 'effect': 'NoSchedule'}]}),
    'priority-classes': (['gpu_tenancy'], {'gpu_tenancy_priority_classes': PRIORITY_OK,
                                           'gpu_tenancy_teams': [{'name': 't', 'priority_class_quotas': {'inference': {'nvidia.com/gpu': 1}}}]}),
    'absent': (['device_plugin', 'gpu_tenancy'], {'device_plugin_state': 'absent', 'gpu_tenancy_state': 'absent'}),
    # The 1.34 schemas know MutatingAdmissionPolicy as v1beta1 only.
    'slice-gate': (['device_plugin', 'gpu_tenancy'], {
        'gpu_tenancy_slice_gate': True, 'gpu_tenancy_slice_gate_namespaces': ['team-a'],
        'gpu_tenancy_slice_gate_namespace_selector': {'matchLabels': {'gpu': 'yes'}},
        'gpu_tenancy_slice_gate_render_api_version': 'admissionregistration.k8s.io/v1beta1',
        'device_plugin_time_slicing': [{'name': 'nvidia.com/mig-1g.10gb', 'replicas': 2, 'rename': 'small-gpu'}]}),
}


def _team(quota=None, **extra):
    team = {'name': 'bad'}
    if quota is not None:
        team['quota'] = quota
    team.update(extra)
    return {'gpu_tenancy_teams': [team]}


# name -> (roles, variables, text the error must contain)
BAD = {
    'pc-too-high': (['gpu_tenancy'], {'gpu_tenancy_priority_classes': [{'name': 'x', 'value': 1000000001}]},
                    'higher values are reserved'),
    'pc-system-prefix': (['gpu_tenancy'], {'gpu_tenancy_priority_classes': [{'name': 'system-gpu', 'value': 5}]},
                         "reserved 'system-'"),
    'pc-not-integer': (['gpu_tenancy'], {'gpu_tenancy_priority_classes': [{'name': 'x', 'value': 'high'}]},
                       "'value'"),
    'pc-bad-policy': (['gpu_tenancy'], {'gpu_tenancy_priority_classes': [{'name': 'x', 'value': 1, 'preemption_policy': 'Always'}]},
                      'preemption_policy'),
    'pc-two-defaults': (['gpu_tenancy'], {'gpu_tenancy_priority_classes': [
        {'name': 'a', 'value': 1, 'global_default': True}, {'name': 'b', 'value': 2, 'global_default': True}]},
        'at most one global_default'),
    'pc-duplicate': (['gpu_tenancy'], {'gpu_tenancy_priority_classes': [{'name': 'a', 'value': 1}, {'name': 'a', 'value': 2}]},
                     'distinct names'),
    'quota-typo': (['gpu_tenancy'], _team({'nvidia.com/mig-2g20gb': 1}), 'is not a GPU quota'),
    'quota-limits': (['gpu_tenancy'], _team({'limits.nvidia.com/gpu': 1}), 'limits.* does not exist'),
    'quota-not-gpu': (['gpu_tenancy'], _team({'cpu': 4}), 'is not a GPU quota'),
    'quota-compute-instance': (['gpu_tenancy'], _team({'nvidia.com/mig-1c.3g.40gb': 1}), 'is not a GPU quota'),
    'quota-negative': (['gpu_tenancy'], _team({'nvidia.com/gpu': -1}), 'whole numbers >= 0'),
    'quota-fraction': (['gpu_tenancy'], _team({'nvidia.com/gpu': 1.5}), 'whole numbers >= 0'),
    'quota-bool': (['gpu_tenancy'], _team({'nvidia.com/gpu': True}), 'whole numbers >= 0'),
    'quota-twice': (['gpu_tenancy'], _team({'nvidia.com/gpu': 1, 'requests.nvidia.com/gpu': 2}), 'lists a resource twice'),
    'scope-undeclared': (['gpu_tenancy'], _team(priority_class_quotas={'batch': {'nvidia.com/gpu': 1}}),
                         'declared priority classes'),
    'team-bad-name': (['gpu_tenancy'], {'gpu_tenancy_teams': [{'name': 'Research_Team'}]}, 'must be DNS labels'),
    'team-same-namespace': (['gpu_tenancy'], {'gpu_tenancy_teams': [{'name': 'a', 'namespace': 'ml'}, {'name': 'b', 'namespace': 'ml'}]},
                            'its own name and namespace'),
    'team-unknown-key': (['gpu_tenancy'], {'gpu_tenancy_teams': [{'name': 'a', 'quotas': {}}]}, 'quotas'),
    'team-label-number': (['gpu_tenancy'], _team(labels={'cost-center': 4711}), 'must be strings'),
    'slicing-one-replica': (['device_plugin'], {'device_plugin_time_slicing': [{'name': 'nvidia.com/gpu', 'replicas': 1}]},
                            'replicas must be an integer >= 2'),
    'slicing-mig-without-mixed': (['device_plugin'], {'device_plugin_mig_strategy': 'single',
                                                      'device_plugin_time_slicing': [{'name': 'nvidia.com/mig-1g.10gb', 'replicas': 2}]},
                                  'the single MIG strategy advertises'),
    'slicing-twice': (['device_plugin'], {'device_plugin_time_slicing': [{'name': 'nvidia.com/gpu', 'replicas': 2},
                                                                         {'name': 'nvidia.com/gpu', 'replicas': 3}]},
                      'more than once'),
    'list-strategy': (['device_plugin'], {'device_plugin_device_list_strategy': 'files'}, 'device_plugin_device_list_strategy must be'),
    'mig-strategy': (['device_plugin'], {'device_plugin_mig_strategy': 'auto'}, 'device_plugin_mig_strategy'),
    'slice-gate-namespace': (['gpu_tenancy'], {'gpu_tenancy_slice_gate': True, 'gpu_tenancy_slice_gate_namespaces': ['Team_A']},
                             "'Team_A' is not a namespace name"),
    'slice-gate-resource': (['gpu_tenancy'], {'gpu_tenancy_slice_gate': True, 'gpu_tenancy_slice_gate_resources': ['small-gpu']},
                            "'small-gpu' is not a resource name"),
}


def _play(name, roles, variables, out):
    variables = dict(variables, device_plugin_render_dir=os.path.join(out, name),
                     gpu_tenancy_render_dir=os.path.join(out, name))
    return {
        'name': name,
        'hosts': 'localhost',
        'gather_facts': False,
        'vars': variables,
        'tasks': [{
            'block': [{'ansible.builtin.include_role': {'name': 'gpufleet.mig.' + role}} for role in roles],
            'rescue': [{'ansible.builtin.copy': {
                'dest': os.path.join(out, name + '.error'),
                'content': '{{ ansible_failed_result | to_json }}',
                'mode': '0644'}}],
        }],
    }


@pytest.fixture(scope='module')
def rendered(tmp_path_factory):
    """Run every case once per test session, shared by pytest-xdist workers; return the output directory."""
    session_dir = tmp_path_factory.getbasetemp()
    if os.environ.get('PYTEST_XDIST_WORKER'):
        session_dir = session_dir.parent  # the workers' common per-session directory
    base = session_dir / 'cluster-manifests'
    base.mkdir(exist_ok=True)
    with open(str(base / '.lock'), 'w') as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if not (base / 'rendered').exists():
            _render(base)
            (base / 'rendered').write_text('ok')
    return str(base / 'out')


def _render(base):
    out = str(base / 'out')
    # state=absent removes the roles' files and nothing else
    os.makedirs(os.path.join(out, 'absent'))
    for name in ('device_plugin.yaml', 'gpu_tenancy.yaml', 'other.yaml'):
        with open(os.path.join(out, 'absent', name), 'w') as handle:
            handle.write('kind: Old\n')

    # The checkout is the collection gpufleet.mig through this link.
    collections = base / 'collections' / 'ansible_collections' / 'gpufleet'
    collections.mkdir(parents=True)
    os.symlink(REPO, str(collections / 'mig'))

    plays = [_play(name, roles, variables, out) for name, (roles, variables) in GOOD.items()]
    plays += [_play(name, roles, variables, out) for name, (roles, variables, dummy) in BAD.items()]
    playbook = base / 'render.yml'
    playbook.write_text(json.dumps(plays))

    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(base / 'collections'),
               ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1')
    ansible_playbook = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
    if not os.path.exists(ansible_playbook):
        ansible_playbook = shutil.which('ansible-playbook')
    proc = subprocess.run([ansible_playbook, str(playbook)], env=env, cwd=str(base),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:]


def _objects(out, case, role):
    """The objects of <out>/<case>/<role>.yaml, in file order."""
    with open(os.path.join(out, case, role + '.yaml')) as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def _by_kind(objects, kind):
    return [obj for obj in objects if obj['kind'] == kind]


def _error(out, case):
    path = os.path.join(out, case + '.error')
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return handle.read()


@pytest.mark.parametrize('case', [c for c in GOOD if c != 'absent'])
def test_good_cases_render_without_error(rendered, case):
    assert _error(rendered, case) is None, _error(rendered, case)


@pytest.mark.parametrize('case,role', [(c, r) for c, (roles, dummy) in GOOD.items() if c != 'absent' for r in roles])
def test_every_manifest_is_valid_for_kubernetes_1_34(rendered, case, role):
    objects = _objects(rendered, case, role)
    assert objects
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail('%s/%s %s/%s: %s' % (case, role, obj.get('kind'), obj.get('metadata', {}).get('name'), exc))


def test_schema_validation_catches_what_the_api_server_would_reject():
    # Guards the guard: a validator that accepts everything would make the
    # test above pass for any output.
    quota = {'apiVersion': 'v1', 'kind': 'ResourceQuota', 'metadata': {'name': 'q'},
             'spec': {'hard': {'requests.nvidia.com/gpu': '1'}, 'scopes': 'NotAList'}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(quota, K8S_VERSION, strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({'apiVersion': 'scheduling.k8s.io/v1', 'kind': 'PriorityClass',
                                      'metadata': {'name': 'p'}, 'value': 1, 'preemptPolicy': 'Never'},
                                     K8S_VERSION, strict=True)


def _plugin(out, case):
    objects = _objects(out, case, 'device_plugin')
    daemonsets = dict((d['metadata']['name'], d) for d in _by_kind(objects, 'DaemonSet'))
    configmap = _by_kind(objects, 'ConfigMap')[0]
    return daemonsets, configmap


def test_device_plugin_defaults(rendered):
    daemonsets, configmap = _plugin(rendered, 'defaults')
    assert sorted(daemonsets) == ['nvidia-device-plugin-daemonset']
    ds = daemonsets['nvidia-device-plugin-daemonset']
    pod = ds['spec']['template']['spec']
    container = pod['containers'][0]
    config = yaml.safe_load(configmap['data']['config.yaml'])

    assert ds['metadata']['namespace'] == 'kube-system'
    assert config == {'version': 'v1', 'flags': {
        'migStrategy': 'mixed', 'failOnInitError': True,
        'plugin': {'deviceListStrategy': 'envvar', 'deviceIDStrategy': 'uuid'}}}
    assert container['image'] == 'nvcr.io/nvidia/k8s-device-plugin:v0.20.1'
    assert {'name': 'NVIDIA_MIG_MONITOR_DEVICES', 'value': 'all'} in container['env']
    assert {'name': 'CONFIG_FILE', 'value': '/config/config.yaml'} in container['env']
    assert container['securityContext'] == {'allowPrivilegeEscalation': False,
                                            'capabilities': {'drop': ['ALL'], 'add': ['SYS_ADMIN']}}
    assert pod['priorityClassName'] == 'system-node-critical'
    assert {'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'} in pod['tolerations']
    assert pod['nodeSelector'] == {'nvidia.com/gpu.deploy.device-plugin': 'true'}
    terms = pod['affinity']['nodeAffinity']['requiredDuringSchedulingIgnoredDuringExecution']['nodeSelectorTerms']
    # ORed terms, one label each
    assert [t['matchExpressions'] for t in terms] == [
        [{'key': 'feature.node.kubernetes.io/pci-10de.present', 'operator': 'In', 'values': ['true']}],
        [{'key': 'feature.node.kubernetes.io/cpu-model.vendor_id', 'operator': 'In', 'values': ['NVIDIA']}],
        [{'key': 'nvidia.com/gpu.present', 'operator': 'In', 'values': ['true']}]]
    assert ds['spec']['updateStrategy']['type'] == 'RollingUpdate'
    volume = [v for v in pod['volumes'] if v['name'] == 'config'][0]
    assert volume['configMap']['name'] == configmap['metadata']['name']
    # the hash on the pod template is the hash of exactly what the ConfigMap holds
    annotation = ds['spec']['template']['metadata']['annotations']['gpufleet.mig/config-sha256']
    assert annotation == hashlib.sha256(configmap['data']['config.yaml'].encode()).hexdigest()


def test_a_config_change_changes_only_the_pod_template_hash(rendered):
    before, config_before = _plugin(rendered, 'defaults')
    after, config_after = _plugin(rendered, 'config-changed')
    ds_before = before['nvidia-device-plugin-daemonset']
    ds_after = after['nvidia-device-plugin-daemonset']
    assert yaml.safe_load(config_after['data']['config.yaml'])['flags']['failOnInitError'] is False
    key = 'gpufleet.mig/config-sha256'
    assert ds_before['spec']['template']['metadata']['annotations'][key] != \
        ds_after['spec']['template']['metadata']['annotations'][key]
    for ds in (ds_before, ds_after):
        del ds['spec']['template']['metadata']['annotations'][key]
    assert ds_before == ds_after


def test_no_mig_strategy_drops_the_mig_privileges(rendered):
    daemonsets, configmap = _plugin(rendered, 'no-mig')
    container = daemonsets['nvidia-device-plugin-daemonset']['spec']['template']['spec']['containers'][0]
    assert yaml.safe_load(configmap['data']['config.yaml'])['flags']['migStrategy'] == 'none'
    assert 'NVIDIA_MIG_MONITOR_DEVICES' not in [e['name'] for e in container['env']]
    assert container['securityContext']['capabilities'] == {'drop': ['ALL']}


def test_single_strategy_with_gfd_and_time_slicing(rendered):
    daemonsets, configmap = _plugin(rendered, 'single-gfd-slicing')
    assert sorted(daemonsets) == ['gpu-feature-discovery', 'nvidia-device-plugin-daemonset']
    config = yaml.safe_load(configmap['data']['config.yaml'])
    assert config['flags']['migStrategy'] == 'single'
    assert config['flags']['plugin']['deviceListStrategy'] == ['envvar', 'cdi-annotations']
    assert config['sharing'] == {'timeSlicing': {'renameByDefault': False, 'failRequestsGreaterThanOne': False,
                                                 'resources': [{'name': 'nvidia.com/gpu', 'replicas': 4}]}}
    plugin = daemonsets['nvidia-device-plugin-daemonset']['spec']['template']['spec']
    gfd = daemonsets['gpu-feature-discovery']['spec']['template']['spec']
    assert plugin['containers'][0]['securityContext']['capabilities'] == {'drop': ['ALL'], 'add': ['SYS_ADMIN']}
    assert gfd['containers'][0]['command'] == ['/usr/bin/gpu-feature-discovery']
    assert gfd['nodeSelector'] == {'nvidia.com/gpu.deploy.gpu-feature-discovery': 'true'}
    for pod in (plugin, gfd):
        assert pod['runtimeClassName'] == 'nvidia'
        assert pod['imagePullSecrets'] == [{'name': 'ngc'}]
        assert {'key': 'dedicated', 'operator': 'Equal', 'value': 'gpu', 'effect': 'NoSchedule'} in pod['tolerations']
        assert pod['containers'][0]['resources'] == {'requests': {'cpu': '50m', 'memory': '64Mi'}}
        assert pod['priorityClassName'] == 'system-node-critical'
    # both DaemonSets roll on a config change
    hashes = set(d['spec']['template']['metadata']['annotations']['gpufleet.mig/config-sha256'] for d in daemonsets.values())
    assert hashes == {hashlib.sha256(configmap['data']['config.yaml'].encode()).hexdigest()}


def test_quota_keys_are_the_enforced_requests_form(rendered):
    objects = _objects(rendered, 'defaults', 'gpu_tenancy')
    quotas = dict(('%s/%s' % (q['metadata']['namespace'], q['metadata']['name']), q) for q in _by_kind(objects, 'ResourceQuota'))
    assert sorted(quotas) == ['serving/gpu-quota', 'team-research/gpu-quota', 'team-research/gpu-quota-training']
    assert quotas['team-research/gpu-quota']['spec'] == {
        'hard': {'requests.nvidia.com/mig-2g.20gb': '4', 'requests.nvidia.com/gpu': '2'}}
    assert quotas['serving/gpu-quota']['spec'] == {
        'hard': {'requests.nvidia.com/mig-1g.10gb': '7', 'requests.nvidia.com/mig-1g.10gb.me': '1'}}
    assert quotas['team-research/gpu-quota-training']['spec'] == {
        'hard': {'requests.nvidia.com/mig-3g.40gb': '1'},
        'scopeSelector': {'matchExpressions': [{'scopeName': 'PriorityClass', 'operator': 'In', 'values': ['training']}]}}
    # never a bare key: the API server accepts it and never enforces it
    for quota in quotas.values():
        for key in quota['spec']['hard']:
            assert key.startswith('requests.nvidia.com/'), key


def test_namespaces_and_file_order(rendered):
    objects = _objects(rendered, 'defaults', 'gpu_tenancy')
    namespaces = dict((n['metadata']['name'], n) for n in _by_kind(objects, 'Namespace'))
    assert sorted(namespaces) == ['no-quota', 'serving', 'team-research']
    assert namespaces['team-research']['metadata']['labels'] == {
        'cost-center': '4711', 'app.kubernetes.io/managed-by': 'gpufleet.mig',
        'gpufleet.mig/role': 'gpu_tenancy', 'gpufleet.mig/team': 'research'}
    # applied in file order, namespaces come before the quotas that live in them
    assert [obj['kind'] for obj in objects] == ['Namespace'] * 3 + ['PriorityClass'] * 2 + ['ResourceQuota'] * 3
    default_classes = dict((p['metadata']['name'], p) for p in _by_kind(objects, 'PriorityClass'))
    assert default_classes['training']['preemptionPolicy'] == 'PreemptLowerPriority'
    assert default_classes['inference']['preemptionPolicy'] == 'Never'
    assert default_classes['training']['value'] > default_classes['inference']['value']


def test_priority_classes_at_the_limit(rendered):
    objects = _objects(rendered, 'priority-classes', 'gpu_tenancy')
    classes = dict((p['metadata']['name'], p) for p in _by_kind(objects, 'PriorityClass'))
    assert classes['training']['value'] == 1000000000
    assert classes['inference']['globalDefault'] is True
    assert classes['training']['globalDefault'] is False
    quota = _by_kind(objects, 'ResourceQuota')[0]
    assert quota['metadata']['name'] == 'gpu-quota-inference'


def test_the_slice_gate_renders_the_policy_and_binding_of_the_settings(rendered):
    objects = _objects(rendered, 'slice-gate', 'gpu_tenancy')
    policy, = _by_kind(objects, 'MutatingAdmissionPolicy')
    binding, = _by_kind(objects, 'MutatingAdmissionPolicyBinding')
    assert policy['apiVersion'] == binding['apiVersion'] == 'admissionregistration.k8s.io/v1beta1'
    assert policy['metadata']['labels']['gpufleet.mig/role'] == 'gpu_tenancy'
    assert '"nvidia.com/small-gpu"' in policy['spec']['matchConditions'][0]['expression']
    assert binding['spec']['matchResources']['namespaceSelector'] == {
        'matchLabels': {'gpu': 'yes'},
        'matchExpressions': [{'key': 'kubernetes.io/metadata.name', 'operator': 'In', 'values': ['team-a']}]}
    assert not _by_kind(_objects(rendered, 'defaults', 'gpu_tenancy'), 'MutatingAdmissionPolicy')


def test_absent_removes_only_the_rendered_files(rendered):
    assert _error(rendered, 'absent') is None, _error(rendered, 'absent')
    assert os.listdir(os.path.join(rendered, 'absent')) == ['other.yaml']


@pytest.mark.parametrize('case', sorted(BAD))
def test_bad_input_fails_clearly_and_renders_nothing(rendered, case):
    expected = BAD[case][2]
    error = _error(rendered, case)
    assert error is not None, 'case %s was accepted' % case
    assert expected in error, error[:3000]
    assert not os.path.exists(os.path.join(rendered, case)), 'case %s rendered something' % case

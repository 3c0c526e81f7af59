# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mig_layout role's tasks call the Python hand-over and report; these tests pin the lines that do.

Each rule lives in Python (plugins/module_utils/k8s/_node_handover.py, tested in test_node_handover.py); what
the role's YAML can still break is whether it passes that decision on. Each test below goes red when one such
line is changed: an apply without pod-resources, no wait for the new advertisement or a comparison by counts
where ids are known, an eviction without its dry run first, the drain deciding without the host's names.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import yaml

ROLE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'mig_layout')


def _load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def _tasks(tasks):
    """Every task of a task list, blocks' own tasks included, in order."""
    for task in tasks or []:
        yield task
        for section in ('block', 'rescue', 'always'):
            yield from _tasks(task.get(section))


def _all_tasks():
    folder = os.path.join(ROLE, 'tasks')
    for name in sorted(os.listdir(folder)):
        for task in _tasks(_load('tasks', name)):
            yield name, task


def _task(file_name, name):
    found = [t for t in _tasks(_load('tasks', file_name)) if t.get('name') == name]
    assert len(found) == 1, 'task %r of %s: %d found' % (name, file_name, len(found))
    return found[0]


def _squash(text):
    return ' '.join(str(text).split())


def test_every_apply_and_second_decision_reads_pod_resources_as_python_decides():
    calls = [(f, t) for f, t in _all_tasks() if 'gpufleet.mig.nvidia_mig_layout' in t]
    applies = [(f, t) for f, t in calls if t['gpufleet.mig.nvidia_mig_layout'].get('apply') is True]
    assert len(applies) >= 2      # the apply, and the apply after a reboot
    for file_name, task in applies:
        assert task['gpufleet.mig.nvidia_mig_layout'].get('pod_resources') == '{{ mig_layout__apply_pod_resources }}', (file_name, task['name'])
    variables = _load('vars', 'main.yml')
    assert variables['mig_layout__apply_pod_resources'] == '{{ mig_layout__pod_resources.apply }}'
    assert variables['mig_layout__pod_resources_mode'] == '{{ mig_layout__pod_resources.decide }}'
    assert "'pod_resources': mig_layout__pod_resources_mode" in _squash(variables['mig_layout__module_defaults'])
    assert _squash(variables['mig_layout__pod_resources']).startswith(
        '{{ mig_layout__k8s | gpufleet.mig.mig_handover_pod_resources(mig_layout_k8s_switch, mig_layout_k8s_drain_fallback, '
        'mig_layout__decision | default(none), mig_layout__final | default(none), mig_layout__repacking | default(false), '
        'mig_layout_k8s_pod_resources) }}')
    # A repack reads them as Python decides for a repack (required on a node), and hands back with what its plan read.
    repack = _task('repack.yml', 'Repack the host')
    assert repack['module_defaults']['gpufleet.mig.nvidia_mig_repack'] == '{{ mig_layout__repack_module_defaults }}'
    assert _squash(variables['mig_layout__repack_module_defaults']).endswith("| combine({'pod_resources': mig_layout__pod_resources_mode}) }}")
    assert _task('repack.yml', 'Start from a clean slate')['ansible.builtin.set_fact']['mig_layout__repacking'] is True
    assert _task('main.yml', 'Start from a clean slate')['ansible.builtin.set_fact']['mig_layout__repacking'] is False
    decision = _task('repack_apply.yml', 'Nobody is evicted by a repack')['ansible.builtin.set_fact']['mig_layout__decision']
    assert decision == {'pods_to_evict': [], 'pod_resources': '{{ mig_layout__repack_plan.pod_resources }}'}


def test_the_decision_after_the_cordon_is_the_switch_modes_and_names_every_holder_in_a_drain():
    task = _task('k8s_pre.yml', 'Plan the layout on the host again, now that the node is cordoned')
    args = task['gpufleet.mig.nvidia_mig_layout']
    assert args['apply'] is False and args['evict'] is True
    assert args['drain'] == '{{ mig_layout__switch.drain }}'
    assert args['pod_resources'] == '{{ mig_layout__apply_pod_resources }}'
    assert task['when'] == 'mig_layout__switch.decide_again'


def test_the_new_advertisement_is_awaited_and_compared_by_device_ids():
    wait = _task('k8s_advertised.yml', 'Wait until the kubelet advertises exactly the MIG devices the GPUs hold')
    assert _squash(wait['until']) == ('(mig_layout__final.expected_device_ids | gpufleet.mig.mig_handover_advertised('
                                      'mig_layout__kubelet_ids, mig_layout_k8s_device_id_strategy)).matches')
    # Exactly Python's answer, in every mode: no condition on the switch mode beside it (issue 43).
    assert wait['when'] == 'mig_layout_k8s_wait_allocatable and not ansible_check_mode and mig_layout__compare_ids'
    assert wait['gpufleet.mig.nvidia_mig_facts']['kubelet_allocatable'] is True
    check = _task('k8s_advertised.yml', 'Require the kubelet to advertise exactly what the GPUs hold')
    assert check['ansible.builtin.assert']['that'] == 'mig_layout__advertised.matches'
    assert 'gpufleet.mig.mig_handover_advertised(' in check['vars']['mig_layout__advertised']
    counts = _task('k8s_advertised.yml', 'Wait until the node advertises as many instances as the GPUs hold')
    assert counts['when'] == 'mig_layout_k8s_wait_allocatable and not ansible_check_mode and not mig_layout__compare_ids'
    variables = _load('vars', 'main.yml')
    assert variables['mig_layout__compare_ids'] == '{{ mig_layout__pod_resources.compare_ids }}'
    assert _squash(variables['mig_layout__final']) == (
        '{{ mig_layout__reapplied if mig_layout__reapplied.resources is defined else mig_layout__declared if '
        'mig_layout__declared.resources is defined else mig_layout__applied | default(mig_layout__decision) }}')
    # After a change, the hand-back awaits it before the uncordon.
    post = [t.get('name') for t in _load('tasks', 'k8s_post.yml')]
    assert post.index('Wait until the kubelet advertises what the GPUs hold') < post.index('Return the Kubernetes node to service')
    awaited = _task('k8s_post.yml', 'Wait until the kubelet advertises what the GPUs hold')
    assert awaited['ansible.builtin.include_tasks'] == 'k8s_advertised.yml' and 'when' not in awaited
    # Every mode's change hands back through k8s_post.yml: the layout's apply and the repack's moves.
    for file_name in ('apply.yml', 'repack_apply.yml'):
        back = [t for t in _tasks(_load('tasks', file_name)) if t.get('ansible.builtin.include_tasks') == 'k8s_post.yml']
        assert [t.get('when') for t in back] == ['mig_layout_k8s_node | length > 0'], file_name


def test_every_eviction_is_tried_as_a_dry_run_first_with_the_same_pods():
    for file_name in sorted(os.listdir(os.path.join(ROLE, 'tasks'))):
        tried = []
        for task in _tasks(_load('tasks', file_name)):
            args = task.get('gpufleet.mig.mig_pod_eviction')
            if args is None:
                continue
            if args.get('dry_run') is True:
                tried.append(args['pods'])
            else:
                assert 'dry_run' not in args, (file_name, task['name'])
                assert args['pods'] in tried, '%s: %r evicts without a dry run first' % (file_name, task['name'])


PLAYBOOK = os.path.join(ROLE, '..', '..', 'playbooks', 'mig_layout.yml')


def _rollout_apply_block():
    """The rollout play's "Apply the layout" block of playbooks/mig_layout.yml."""
    found = [task for play in _plays() for task in play.get('tasks', []) if task.get('name') == 'Apply the layout']
    assert len(found) == 1
    return found[0]


def _plays():
    with open(PLAYBOOK) as handle:
        return yaml.safe_load(handle)


def _read_after_the_import(file_name):
    """The tasks of playbooks/mig_layout.yml's plays after the play that imports ``file_name`` (none where none does)."""
    plays = _plays()
    imports = [position for position, play in enumerate(plays) if any(
        (task.get('ansible.builtin.import_role') or {}).get('tasks_from') == file_name for task in play.get('tasks', []))]
    return [task for play in plays[imports[0] + 1:] for task in play.get('tasks', [])] if imports else []


def test_the_rollout_enters_the_role_wherever_its_first_decision_did_not_settle_the_host():
    """A no-op rollout is one decision per host: the rollout play takes only the hosts that decision did not find in
    their layout (gpufleet.mig.mig_layout_to_change, tested in test_rollout_plan.py), every host in a repack, and enters
    the role on each. The first decision is the role's own, with the role's module options, on hosts that are not
    Kubernetes nodes only, its failure left to the role; the pre-flight makes it on every host of a layout rollout at
    once (no serial), none in a repack."""
    block = _rollout_apply_block()
    assert block['ignore_unreachable'] is True
    role, = block['block']
    assert role['ansible.builtin.include_role'] == {
        'name': 'gpufleet.mig.mig_layout', 'tasks_from': "{{ mig_layout_tasks | default('main') }}"}
    assert 'when' not in role
    plays = _plays()
    rollout_play, = [play for play in plays if play.get('name') == 'Roll out the MIG layout']
    assert rollout_play['hosts'] == "{{ hostvars['localhost'].mig_layout__to_change | default([]) }}"
    # Every host of the rollout until the first decisions narrow it: a repack, which makes none, keeps them all.
    first_play = plays[0]
    named, = [task for task in first_play['tasks'] if 'mig_layout__to_change' in task.get('ansible.builtin.set_fact', {})]
    assert named['ansible.builtin.set_fact']['mig_layout__to_change'] == '{{ ansible_play_hosts_all }}'
    assert named['delegate_to'] == 'localhost' and named['delegate_facts'] is True and named['run_once'] is True
    # The failure budget stays a percentage of every host of the rollout, not of the hosts its play takes.
    assert named['ansible.builtin.set_fact']['mig_layout__fleet_size'] == '{{ ansible_play_hosts_all | length }}'
    budget = rollout_play['vars']
    assert budget['mig_layout_rollout_fleet_size'] == "{{ hostvars['localhost'].mig_layout__fleet_size | int }}"
    assert _squash(budget['mig_layout_rollout_over_budget']).endswith('* (mig_layout_rollout_fleet_size | int) }}')
    assert _squash(budget['mig_layout_rollout_progress']).endswith('ansible_check_mode, mig_layout_rollout_fleet_size | int) }}')
    # The report counts the hosts outside the rollout play as reached by their first decision.
    report, = [play for play in plays if play.get('name', '').startswith('Report the fleet plan')]
    reading = [_squash(str(task['ansible.builtin.set_fact'])) for task in report['tasks'] if 'ansible.builtin.set_fact' in task]
    assert len([text for text in reading if "hostvars['localhost'].mig_layout__to_change) }}" in text]) == 2, reading
    deciding = [play for play in plays if any(
        (task.get('ansible.builtin.import_role') or {}).get('tasks_from') == 'rollout_decide.yml' for task in play.get('tasks', []))]
    assert len(deciding) == 1
    play, = deciding
    first, narrowed = play['tasks']
    assert first['ansible.builtin.import_role'] == {'name': 'gpufleet.mig.mig_layout', 'tasks_from': 'rollout_decide.yml'}
    # A dry run leaves out every host its first decision answered (the fleet plan reads it); the hosts a real run's
    # batches would take are kept for its line on where a real run would stop.
    assert narrowed['ansible.builtin.set_fact'] == {
        'mig_layout__to_change': '{{ ansible_play_hosts_all | gpufleet.mig.mig_layout_to_change(hostvars, ansible_check_mode) }}',
        'mig_layout__rollout_hosts': '{{ ansible_play_hosts_all | gpufleet.mig.mig_layout_to_change(hostvars) }}'}
    assert named['ansible.builtin.set_fact']['mig_layout__rollout_hosts'] == '{{ ansible_play_hosts_all }}'
    # The rollout play tells its progress in a real run only; a dry run tells it once in the report, from the real
    # run's hosts, true for check mode.
    progress, = [task for task in rollout_play['tasks'] if task.get('name') == 'Tell the progress of the rollout']
    assert progress['when'] == 'not ansible_check_mode'
    dry, = [task for task in report['tasks'] if task.get('name') == 'Tell the progress of the dry run (where a real run would stop)']
    assert dry['when'] == "ansible_check_mode and hostvars['localhost'].mig_layout__rollout_hosts | length > 0"
    assert _squash(dry['ansible.builtin.debug']['msg']).startswith(
        "{{ (hostvars['localhost'].mig_layout__rollout_hosts | gpufleet.mig.mig_layout_rollout_progress("
        "hostvars['localhost'].mig_layout__rollout_hosts, mig_layout_rollout, "
        "hostvars['localhost'].mig_layout_rollout_failed | default({}) | list, true, ")
    assert narrowed['delegate_to'] == 'localhost' and narrowed['delegate_facts'] is True and narrowed['run_once'] is True
    assert first['ignore_unreachable'] is True and 'when' not in first
    assert play['hosts'] == "{{ mig_layout_hosts | default('gpu_hosts') if mig_layout_tasks | default('main') == 'main' else [] }}"
    assert 'serial' not in play
    # Before the fleet lease and the rollout; after the first play's checks, which stop the run on any problem.
    names = [play.get('name') or play.get('ansible.builtin.import_playbook') for play in plays]
    rollout = names.index('Roll out the MIG layout')
    assert names.index(play['name']) < names.index('Take the fleet lease') < rollout
    assert plays[0]['any_errors_fatal'] is True and names.index(play['name']) > 0
    decide, = _load('tasks', 'rollout_decide.yml')
    # No wait for the host lock before the batches: a busy host goes through the role, which waits as configured.
    assert decide['gpufleet.mig.nvidia_mig_layout'] == {'apply': False, 'lock_timeout': 0}
    assert decide['module_defaults'] == {'gpufleet.mig.nvidia_mig_layout': '{{ mig_layout__module_defaults }}'}
    assert decide['environment'] == _task('decide.yml', 'Plan the layout on the host without changing a GPU')['environment']
    assert decide['register'] == 'mig_layout__decision'
    assert _squash(decide['changed_when']) == ("mig_layout__decision.changed | default(false) or (ansible_check_mode and "
                                               "'in_layout' in mig_layout__decision and not mig_layout__decision.in_layout)")
    # Issue 39: its failure is quiet (no error block per host); a failure lacks in_layout, so it is never a decision.
    assert decide['failed_when'] is False and 'ignore_errors' not in decide
    assert decide['when'] == 'mig_layout_k8s_node | length == 0'


# ---- issue 27, section 3 ----------------------------------------------------------------------------------

def test_no_error_is_ignored_without_a_later_task_failing_on_it():
    # ignore_errors only defers a failure to the task that explains it: that task reads the registered result.
    folder = os.path.join(ROLE, 'tasks')
    for file_name in sorted(os.listdir(folder)):
        tasks = list(_tasks(_load('tasks', file_name)))
        for position, task in enumerate(tasks):
            if not task.get('ignore_errors'):
                continue
            registered = task.get('register')
            assert registered, (file_name, task['name'])
            later = ' '.join(str(t) for t in tasks[position + 1:] + _read_after_the_import(file_name))
            assert registered in later, '%s: %r ignores errors that no later task reads' % (file_name, task['name'])
        text = open(os.path.join(folder, file_name)).read()
        assert 'component_pods.resources | default([])' not in text


def test_the_paused_components_wait_is_decided_in_python_and_fails_on_a_listing_error():
    wait = _task('k8s_pre.yml', "Wait until the paused components' pods are deleted from the node")
    assert _squash(wait['until']) == ('(mig_layout__component_pods | gpufleet.mig.mig_handover_paused_wait('
                                      'mig_layout__handover.components.pause | list)).done')
    assert wait['retries'] == '{{ mig_layout__handover.components.wait_retries }}'
    assert wait['when'] == 'mig_layout__handover.components.pause | length > 0 and not ansible_check_mode'
    check = _task('k8s_pre.yml', "Require the paused components' pods to be gone before any GPU changes")
    assert check['ansible.builtin.fail']['msg'] == '{{ mig_layout__paused_wait.problem }}'
    assert check['when'] == 'mig_layout__paused_wait.problem is not none'
    assert _squash(check['vars']['mig_layout__paused_wait']) == (
        '{{ mig_layout__component_pods | gpufleet.mig.mig_handover_paused_wait(mig_layout__handover.components.pause | list, '
        'mig_layout_k8s_node, mig_layout_k8s_pause_timeout) }}')
    handover = _task('k8s_pre.yml', "Decide the node's labels, annotations and cordon through the change")
    assert 'mig_layout__switch.cordon, mig_layout_k8s_pause_timeout) }}' in _squash(handover['ansible.builtin.set_fact']['mig_layout__handover'])


def test_a_refused_request_writes_failed_before_the_run_fails():
    names = [t.get('name') for t in _load('tasks', 'k8s_request.yml')]
    write = _task('k8s_request.yml', 'Report the refused request on the node')
    assert write['kubernetes.core.k8s']['definition'] == '{{ mig_layout__request.refusal }}'
    assert write['when'] == 'mig_layout__request.refusal is not none'
    assert names.index('Report the refused request on the node') < names.index('Refuse a label that names no layout of the catalog')


def test_a_failure_hands_the_node_back_by_what_the_apply_says_it_touched():
    task = _load('tasks', 'k8s_failed.yml')[0]
    assert _squash(task['vars']['mig_layout__failed']) == (
        '{{ mig_layout__handover | gpufleet.mig.mig_handover_failure(mig_layout__failure_reason, mig_layout__gpu_touched, '
        'mig_layout__applied | default(none)) }}')


def test_recovery_awaits_the_advertisement_before_the_uncordon():
    tasks = _load('tasks', 'k8s_recover.yml')
    names = [t.get('name') for t in tasks]
    wait = 'Wait until the kubelet advertises what the GPUs hold before the node goes back into service'
    assert names.index(wait) < names.index('Return the node to service')
    assert tasks[names.index(wait)]['ansible.builtin.include_tasks'] == 'k8s_advertised.yml'
    assert tasks[names.index(wait)]['when'] == 'mig_layout__recovery is not none and mig_layout__recovery.await_advertisement'
    restore = _task('k8s_recover.yml', 'Restore the GPU components an earlier change left paused')
    assert restore['kubernetes.core.k8s']['definition'] == '{{ mig_layout__recovery.restore }}'
    assert [t['name'] for t in _tasks(tasks) if 'kubernetes.core.k8s_drain' in t] == ['Uncordon the node an earlier change left cordoned']


def test_on_the_reboot_path_the_layout_and_pending_mode_are_declared_only_after_the_drain():
    tasks = _load('tasks', 'apply.yml')
    first = _task('apply.yml', 'Apply the layout (the module verifies the GPUs afterwards)')
    assert first['gpufleet.mig.nvidia_mig_layout']['defer_pending'] == '{{ mig_layout__k8s }}'
    reboot = [t for t in tasks if t.get('name') == 'Reboot so that the pending MIG mode takes effect, then apply again'][0]
    names = [t.get('name') for t in reboot['block']]
    declare = 'Declare the layout and leave the MIG mode pending for the reboot'
    assert names.index('Drain the Kubernetes node before the reboot') < names.index(declare) < names.index('Reboot and apply again')
    again = reboot['block'][names.index('Reboot and apply again')]
    assert [t['name'] for t in again['block']][0] == 'Reboot the host'
    assert again['when'] == 'mig_layout__declared is skipped or not mig_layout__declared.in_layout'
    args = reboot['block'][names.index(declare)]['gpufleet.mig.nvidia_mig_layout']
    assert args['apply'] is True and 'defer_pending' not in args
    assert reboot['block'][names.index(declare)]['when'] == 'mig_layout__k8s'


def test_a_second_owner_of_mig_is_decided_in_python():
    check = _task('k8s_pre.yml', 'Require the node to exist and no other owner of MIG on it')
    assert 'mig_layout_allow_other_owner or mig_layout__other_owners | length == 0' in check['ansible.builtin.assert']['that']
    assert _squash(check['vars']['mig_layout__other_owners']) == (
        '{{ mig_layout__node.resources | first | default({}) | gpufleet.mig.mig_handover_other_owners( [mig_layout__dra_v1, '
        "mig_layout__dra_v1beta2, mig_layout__dra_v1beta1] | map(attribute='resources', default=[]) | flatten) }}")


def test_a_drain_without_pod_resources_refuses_pods_it_cannot_see_before_any_eviction():
    tasks = _load('tasks', 'k8s_pre.yml')
    names = [t.get('name') for t in tasks]
    guard = 'Refuse a drain that cannot see every pod that may hold a GPU'
    assert names.index('Plan the layout on the host again, now that the node is cordoned') < names.index(guard)
    assert names.index(guard) < names.index('Evict the pods on instances that go, all or none')
    block = tasks[names.index(guard)]
    assert block['when'] == 'mig_layout__switch.drain and not mig_layout__decision_cordoned.pod_resources.read'
    refuse = block['block'][1]
    assert refuse['ansible.builtin.fail']['msg'] == '{{ mig_layout__unseen.problem }}'
    assert _squash(refuse['vars']['mig_layout__unseen']).endswith("mig_layout_k8s_node, false) }}")
    assert "gpufleet.mig.mig_handover_evictions('drain', mig_layout__decision_cordoned.pods_to_evict," in _squash(
        refuse['vars']['mig_layout__unseen'])


def test_a_dry_run_of_a_repack_ends_at_its_plan():
    """The repack's plan is nvidia_mig_repack in check mode; a dry run does not enter the moves, whose call in check mode
    would plan them again (and whose hand-over changes nothing in check mode): one module call per host."""
    moves = _task('repack.yml', 'Move the idle instances')
    assert moves['ansible.builtin.include_tasks'] == 'repack_apply.yml'
    assert _squash(moves['when']).startswith('not ansible_check_mode and '), moves['when']
    assert _task('repack.yml', 'Plan the moves without changing a GPU')['check_mode'] is True

# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_rollout_plan: the rollout settings checked before any host is touched, batch progress, the fleet plan."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._rollout_plan import (
    RolloutSettingsError,
    allowed_failures,
    batch_sizes,
    CORDON_NOTE,
    final_for_dry_run,
    fleet_plan,
    hosts_to_change,
    instances_text,
    play_serial,
    progress,
    real_run_stop,
    rollout_settings,
    settled,
    unfinished,
)


@pytest.mark.parametrize('serial, expected', [
    (1, 1), ('2', 2), ('50%', '50%'), (' 25 % ', '25%'), ('100%', '100%'), (3.0, 3), ([1, '50%'], [1, '50%']),
])
def test_serial_accepted(serial, expected):
    assert rollout_settings(serial)['serial'] == expected


@pytest.mark.parametrize('serial', [0, '0', -1, '-1', 'abc', '0%', '101%', '12.5%', True, 1.5, [], [1, 0], None])
def test_serial_refused_with_one_line(serial):
    with pytest.raises(RolloutSettingsError) as exc:
        rollout_settings(serial)
    message = str(exc.value)
    assert message.startswith('mig_layout_serial must be a whole number of hosts per batch (1 or more)')
    assert message.endswith('got %r' % (serial,)) and '\n' not in message


@pytest.mark.parametrize('budget, expected', [(0, 0), ('0', 0), (25, 25), ('25', 25), ('25%', 25), (' 25 %', 25),
                                              (12.5, 12.5), ('100', 100), (100.0, 100)])
def test_max_fail_percentage_accepted_and_25_percent_is_25(budget, expected):
    assert rollout_settings(1, budget)['max_fail_percentage'] == expected


@pytest.mark.parametrize('budget', ['abc', -1, '-5', 101, '101%', True, None, '25%%', '%'])
def test_max_fail_percentage_refused_with_one_line(budget):
    with pytest.raises(RolloutSettingsError) as exc:
        rollout_settings(1, budget)
    assert str(exc.value) == ("mig_layout_max_fail_percentage must be a percentage of the play's hosts from 0 to 100 "
                              "(25 and 25%% are the same), got %r" % (budget,))


@pytest.mark.parametrize('serial, hosts, sizes', [
    (1, 3, [1, 1, 1]), (2, 5, [2, 2, 1]), ('50%', 6, [3, 3]), ('50%', 5, [2, 2, 1]), ('10%', 5, [1] * 5),
    ('100%', 4, [4]), ([1, '50%'], 7, [1, 3, 3]), ([1, 2], 6, [1, 2, 2, 1]), (10, 3, [3]),
])
def test_batch_sizes_as_ansible_cuts_them(serial, hosts, sizes):
    assert batch_sizes(serial, hosts) == sizes


@pytest.mark.parametrize('budget, hosts, allowed', [(0, 6, 0), (25, 4, 1), (25, 3, 0), (50, 5, 2), (100, 6, 6),
                                                    (12.5, 8, 1)])
def test_allowed_failures(budget, hosts, allowed):
    assert allowed_failures(budget, hosts) == allowed


HOSTS = ['a', 'b', 'c', 'd', 'e', 'f']


def test_progress_counts_batches_hosts_failures_and_budget():
    settings = rollout_settings(2, '25%')
    first = progress(HOSTS, ['a', 'b'], settings, [])
    assert (first['batch'], first['batches'], first['done'], first['failed'], first['budget_left']) == (1, 3, 2, 0, 1)
    assert first['line'] == ('batch 1 of 3: 2 of 6 host(s) done, 0 failed; failure budget left: 1 more host(s) may '
                             'fail (mig_layout_max_fail_percentage=25)')
    second = progress(HOSTS, ['c', 'd'], settings, ['c'])
    assert (second['batch'], second['done'], second['budget_left'], second['over_budget']) == (2, 4, 0, False)
    assert '1 failed (c)' in second['line']
    spent = progress(HOSTS, ['c', 'd'], settings, ['c', 'd'])
    assert spent['over_budget'] and spent['line'].endswith('failure budget spent: the rollout stops here')
    last = progress(HOSTS, ['e', 'f'], settings, ['c', 'd'])
    assert (last['batch'], last['done']) == (3, 6) and last['line'].endswith('failure budget spent')


def test_check_mode_is_one_batch_of_every_host():
    """A dry run is not cut into the change batches: the play's serial is every host, whatever mig_layout_serial."""
    for serial in (1, 2, '25%', [1, 5, '10%']):
        assert play_serial(serial, check_mode=True) == '100%'
        assert batch_sizes(play_serial(serial, check_mode=True), 1000) == [1000]
        assert play_serial(serial, check_mode=False) == serial
    dry = progress(HOSTS, HOSTS, rollout_settings(2, 0), [], check_mode=True)
    assert (dry['batch'], dry['batches'], dry['done']) == (1, 1, 6)
    assert dry['line'].startswith('batch 1 of 1: 6 of 6 host(s) done, 0 failed; failure budget left: 0 more')


@pytest.mark.parametrize('failed, stop', [(['c', 'd'], 2), (['a', 'b'], 1), (['e', 'f'], None), (['b', 'e'], None),
                                          (['a', 'c', 'e'], 2)])
def test_a_dry_run_says_after_which_batch_a_real_run_would_stop(failed, stop):
    """Serial 2 and budget 25% over 6 hosts allow 1 failure: a real run stops after the first batch that leaves 2."""
    settings = rollout_settings(2, '25%')
    assert real_run_stop(HOSTS, settings, failed) == stop
    line = progress(HOSTS, HOSTS, settings, failed, check_mode=True)['line']
    if stop:
        assert line.endswith('failure budget spent (check mode: a real run with mig_layout_serial=2 would stop after '
                             'batch %d of 3)' % stop)
    else:
        assert line.endswith('failure budget spent')


def test_the_hosts_a_run_fails_and_why():
    settings = rollout_settings(2, 0)
    assert unfinished(HOSTS, HOSTS, {}, settings, 'MIG layout nighttime') == {}
    # c failed in the second batch; the rollout stopped before e and f.
    failing = unfinished(HOSTS, ['a', 'b', 'c', 'd'], {'c': 'MIG layout nighttime was not applied on c: NVML error'},
                         settings, 'MIG layout nighttime')
    stopped = ('Not changed: the rollout of MIG layout nighttime stopped before this host because 1 of 6 host(s) failed, '
               'more than mig_layout_max_fail_percentage=0 percent allows: c: MIG layout nighttime was not applied on c: '
               'NVML error.')
    assert failing == {'c': 'MIG layout nighttime was not applied on c: NVML error', 'e': stopped, 'f': stopped}
    # a lost host that the rollout reached fails with its own reason only
    assert unfinished(['a', 'b'], ['a', 'b'], {'b': 'lost'}, settings, 'the MIG repack') == {'b': 'lost'}


@pytest.mark.parametrize('decision, done', [
    ({'changed': False, 'in_layout': True, 'gpus': []}, True),
    # in check mode too: the dry run's plan is the decision's
    ({'changed': False, 'in_layout': True, 'gpus': [], 'skipped': False, 'failed': False}, True),
    ({'changed': False, 'in_layout': False, 'gpus': []}, False),
    # the role decides again, changes the host or records why not
    ({'failed': True, 'msg': 'initialise NVML failed: NVML_ERROR_LIBRARY_NOT_FOUND'}, False),
    ({'failed': True, 'msg': 'x', 'in_layout': True}, False),
    ({'unreachable': True, 'msg': 'gone', 'in_layout': True}, False),
    # a Kubernetes node or a repack: the first decision was skipped
    ({'skipped': True, 'changed': False, 'false_condition': 'mig_layout_k8s_node | length == 0'}, False),
    ({'in_layout': 'yes'}, False),
    (None, False),
    ('', False),
])
def test_only_a_first_decision_that_found_the_host_in_its_layout_settles_it(decision, done):
    """playbooks/mig_layout.yml's rollout play takes (and enters the role on) every host this is False for."""
    assert settled(decision) is done
    assert hosts_to_change(['h'], {'h': decision}) == ([] if done else ['h'])


_FLAG = st.sampled_from([None, False, True, 'yes', '', 0, 1])
_FIRST_DECISIONS = st.one_of(
    st.none(), st.text(max_size=3),
    st.fixed_dictionaries({}, optional={'in_layout': _FLAG, 'failed': _FLAG, 'unreachable': _FLAG, 'skipped': _FLAG,
                                        'changed': st.booleans(), 'gpus': st.just([])}))


@given(st.lists(_FIRST_DECISIONS, max_size=8))
def test_the_rollout_leaves_out_only_hosts_whose_first_decision_succeeded_in_the_layout(found):
    """The safety side of leaving a host out of the rollout play: it is never changed in this run, so only a first
    decision that ran, did not fail and found the host in its layout (``in_layout`` exactly true) may leave it out.
    Every other host stays, in its order, and the role decides again there; the one left out counts as reached and in
    its layout in the fleet plan, never as not reached."""
    hosts = ['h%d' % number for number in range(len(found))]
    decisions = dict(zip(hosts, found))
    to_change = hosts_to_change(hosts, decisions)
    assert to_change == [host for host in hosts if host in to_change]
    left_out = [host for host in hosts if host not in to_change]
    for host, decision in decisions.items():
        succeeded_in_layout = (isinstance(decision, dict) and decision.get('in_layout') is True
                               and not any(decision.get(flag) for flag in ('failed', 'unreachable', 'skipped')))
        assert (host in left_out) == succeeded_in_layout, decision
    plan = fleet_plan([{'host': host, 'started': True, 'decision': decisions[host], 'error': None} for host in left_out]
                      + [{'host': host, 'started': False, 'decision': None, 'error': None} for host in to_change], 'n')
    assert plan['not_reached'] == to_change
    assert plan['totals']['hosts_in_layout'] == len(left_out)


@pytest.mark.parametrize('decision, final', [
    # the answer of a dry run: the role in check mode would make the same call and change nothing
    ({'changed': False, 'in_layout': True, 'gpus': []}, True),
    ({'changed': False, 'in_layout': False, 'gpus': [], 'reboot_required': False}, True),
    ({'changed': False, 'in_layout': True, 'persistence': {'pending': ['gpufleet-mig.service']}}, True),
    # a failure registered with failed_when: false carries no in_layout: the role decides again and says why
    ({'changed': False, 'failed': False, 'msg': 'another gpufleet.mig run holds the host lock'}, False),
    ({'failed': True, 'msg': 'x', 'in_layout': False}, False),
    ({'unreachable': True, 'msg': 'gone', 'in_layout': False}, False),
    # a Kubernetes node (skipped), a reboot to refuse or to plan: the role decides
    ({'skipped': True, 'changed': False}, False),
    ({'changed': False, 'in_layout': False, 'reboot_required': True}, False),
    # found by hypothesis: a host a real run leaves out (settled) is left out of a dry run too
    ({'in_layout': True, 'reboot_required': True}, True),
    (None, False),
    ('', False),
])
def test_a_dry_run_takes_only_the_hosts_its_first_decision_could_not_answer(decision, final):
    """With --check, playbooks/mig_layout.yml's rollout play takes (and enters the role on) every host this is False
    for; the fleet plan reads the others' first decision, so a dry run is one module call per host."""
    assert final_for_dry_run(decision) is final
    assert hosts_to_change(['h'], {'h': decision}, check_mode=True) == ([] if final else ['h'])


_DECIDED = st.fixed_dictionaries({'in_layout': st.booleans()}, optional={
    'reboot_required': _FLAG, 'failed': _FLAG, 'skipped': _FLAG, 'persistence': st.just({'pending': ['u']})})


@given(st.lists(st.one_of(_FIRST_DECISIONS, _DECIDED), max_size=8))
def test_a_dry_run_leaves_out_a_subset_of_the_real_runs_hosts_each_with_a_decision_that_succeeded(found):
    """What a dry run leaves out of the rollout play it reports from the first decision: only a decision that ran,
    succeeded and plans no reboot may be that answer. A real run's hosts include every host the dry run enters, so the
    dry run's line on where a real run would stop counts the same hosts as the real run's batches."""
    hosts = ['h%d' % number for number in range(len(found))]
    decisions = dict(zip(hosts, found))
    dry = hosts_to_change(hosts, decisions, check_mode=True)
    real = hosts_to_change(hosts, decisions)
    assert set(dry) <= set(real) and dry == [host for host in real if host in dry]
    for host in set(hosts) - set(dry):
        decision = decisions[host]
        assert settled(decision) or (isinstance(decision, dict) and 'in_layout' in decision and not any(
            decision.get(flag) for flag in ('failed', 'unreachable', 'skipped', 'reboot_required'))), decision


def test_the_rollout_play_takes_the_hosts_the_first_decision_did_not_settle_in_their_order():
    in_layout = {'changed': False, 'in_layout': True, 'gpus': []}
    differs = {'changed': False, 'in_layout': False, 'gpus': []}
    decisions = {'a': in_layout, 'b': differs, 'c': None, 'd': in_layout, 'e': {'skipped': True}}
    assert hosts_to_change(['e', 'd', 'c', 'b', 'a', 'f'], decisions) == ['e', 'c', 'b', 'f']
    assert hosts_to_change([], decisions) == []


def test_the_budget_is_a_percentage_of_every_host_of_the_rollout_not_only_those_it_changes():
    """Of 8 hosts, 4 already in the layout: 25% lets 2 fail, not 1 (25% of the 4 the rollout play takes)."""
    settings = rollout_settings(1, 25)
    changing = ['a', 'b', 'c', 'd']
    assert progress(changing, ['b'], settings, ['a', 'b'], fleet_size=8)['budget_left'] == 0
    assert not progress(changing, ['b'], settings, ['a', 'b'], fleet_size=8)['over_budget']
    assert progress(changing, ['b'], settings, ['a', 'b'])['over_budget']
    line = progress(changing, ['c'], settings, ['a', 'b', 'c'], fleet_size=8)['line']
    assert line.startswith('batch 3 of 4: 3 of 4 host(s) done, 3 failed (a, b, c); failure budget spent: the rollout stops'), line
    # A dry run says where the real run would stop, with the same budget.
    assert real_run_stop(changing, settings, ['a', 'b', 'c'], 8) == 3
    assert real_run_stop(changing, settings, ['a', 'b', 'c']) == 2
    assert progress(changing, changing, settings, ['a', 'b', 'c'], True, 8)['line'].endswith(
        'would stop after batch 3 of 4)')


def test_progress_with_percentage_batches():
    settings = rollout_settings('50%', 0)
    assert progress(HOSTS, ['d', 'e', 'f'], settings, [])['line'].startswith('batch 2 of 2: 6 of 6 host(s) done')


def instance(profile, start, ident=None):
    return {'profile': profile, 'id': ident, 'placement': {'start': start, 'size': 1}}


def gpu(index, before, after, **more):
    record = {
        'index': index, 'name': 'NVIDIA A100-SXM4-80GB', 'in_layout': False, 'deferred': False,
        'mode': {'before': {'current': 'enabled', 'pending': 'enabled'}, 'after': {'current': 'enabled', 'pending': 'enabled'}},
        'before': before, 'after': after, 'mig_devices': {'3g': 2},
        'destroyed_instances': [i for i in before if i['id'] not in set(a['id'] for a in after)],
        'pods_to_evict': [], 'reboot_required': False,
    }
    record.update(more)
    return record


DAY = [instance('1g.10gb', s, 7 + s) for s in range(7)]
NIGHT = [instance('3g.40gb', 0), instance('3g.40gb', 4)]
KEPT = [instance('3g.40gb', 0, 1), instance('3g.40gb', 4, 2)]


def test_instances_text():
    assert instances_text(DAY) == '7x1g.10gb'
    assert instances_text([instance('1g.10gb', 6), instance('3g.40gb', 0), instance('1c.3g.40gb', 4)]) == \
        '1x1c.3g.40gb + 1x3g.40gb + 1x1g.10gb'
    assert instances_text([]) == 'no instances'


def test_fleet_plan_per_gpu_refused_not_reached_and_totals():
    records = [
        {'host': 'a', 'started': True, 'error': None, 'kubernetes_node': 'node-a', 'decision': {
            'in_layout': False, 'pods_to_evict': ['team/train-1'],
            'gpus': [gpu(0, DAY, NIGHT, pods_to_evict=['team/train-1']),
                     gpu(1, KEPT, KEPT, in_layout=True)],
            'unmatched_gpus': []}},
        {'host': 'b', 'started': True, 'decision': None,
         'error': 'GPU 0: GPU instance 10 (1g.10gb at slice 3) has running processes [4242]'},
        {'host': 'c', 'started': True, 'error': None, 'decision': {'in_layout': True, 'gpus': [], 'pods_to_evict': []}},
        {'host': 'd', 'started': False, 'error': None, 'decision': None},
        {'host': 'e', 'started': True, 'error': None, 'decision': {
            'in_layout': False, 'pods_to_evict': [],
            'gpus': [gpu(0, [], None, deferred=True, mig_devices={'1g': 'max'},
                         mode={'before': {'current': 'disabled', 'pending': 'disabled'},
                               'after': {'current': 'enabled', 'pending': 'enabled'}})]}},
    ]
    plan = fleet_plan(records, 'nighttime', check_mode=True)
    assert plan['refused'] == {'b': 'GPU 0: GPU instance 10 (1g.10gb at slice 3) has running processes [4242]'}
    assert plan['not_reached'] == ['d']
    assert [h['status'] for h in plan['hosts']] == ['change', 'refused', 'in layout', 'not reached', 'change']
    assert plan['totals'] == {
        'hosts': 5, 'hosts_evaluated': 4, 'hosts_to_change': 2, 'hosts_in_layout': 1, 'hosts_refused': 1, 'hosts_failed': 0,
        'hosts_not_reached': 1, 'hosts_persistence_failed': 0, 'gpus_to_change': 2, 'instances_destroyed': 7,
        'instances_created': 2, 'pods_to_evict': 1}
    assert plan['lines'] == [
        'a GPU 0: 7x1g.10gb -> 2x3g.40gb (7 instance(s) destroyed, pods to evict: team/train-1)',
        'e GPU 0: MIG disabled -> MIG enabled, instances 1g: max once MIG is on',
        'a: pods to evict from node node-a: team/train-1' + CORDON_NOTE,
        'b: refused: GPU 0: GPU instance 10 (1g.10gb at slice 3) has running processes [4242]',
        'd: not reached',
        'plan of layout nighttime: 4 of 5 host(s) evaluated, 2 to change, 1 in layout, 1 refused, 0 failed, 1 not reached; '
        '2 GPU(s) to change, 7 instance(s) destroyed, 2 created, 1 pod(s) to evict',
    ]
    gpu_a1 = plan['hosts'][0]['gpus'][1]
    assert gpu_a1['in_layout'] and gpu_a1['instances_kept'] == 2 and gpu_a1['instances_destroyed'] == 0


def test_a_host_whose_gpus_the_layout_all_misses_is_refused_never_in_layout():
    """A decision that matched no GPU (all unmatched) is trivially "in layout"; the plan counts it refused."""
    unmatched = [{'index': 0, 'name': 'NVIDIA A30', 'reason': 'matched by no entry: the device-filter of entry 0 does not name 0x20B710DE'}]
    records = [{'host': 'a30', 'started': True, 'error': None, 'decision': {
        'in_layout': True, 'gpus': [], 'pods_to_evict': [], 'unmatched_gpus': unmatched}}]
    plan = fleet_plan(records, 'gh200-only')
    assert [h['status'] for h in plan['hosts']] == ['refused'] and plan['totals']['hosts_in_layout'] == 0
    assert plan['refused'] == {'a30': 'the layout matches none of its MIG-capable GPUs: GPU 0: matched by no entry: '
                                      'the device-filter of entry 0 does not name 0x20B710DE'}


def test_a_dry_run_says_a_kubernetes_node_is_decided_again_after_the_cordon_a_real_run_does_not():
    records = [{'host': 'a', 'started': True, 'error': None, 'kubernetes_node': 'node-a', 'decision': {
        'in_layout': False, 'pods_to_evict': ['team/train-1'], 'gpus': [gpu(0, DAY, NIGHT, pods_to_evict=['team/train-1'])]}}]
    dry = fleet_plan(records, 'nighttime', check_mode=True)['lines']
    assert dry[1] == 'a: pods to evict from node node-a: team/train-1' + CORDON_NOTE
    assert 'decided before the cordon' in CORDON_NOTE and 'decides again' in CORDON_NOTE
    assert fleet_plan(records, 'nighttime')['lines'][1] == 'a: pods to evict from node node-a: team/train-1'
    # A host that is not a Kubernetes node has nothing to cordon: no note.
    records[0]['kubernetes_node'] = None
    assert fleet_plan(records, 'nighttime', check_mode=True)['lines'][1] == 'a: pods to evict: team/train-1'


def test_fleet_plan_of_a_real_run_keeps_instances_and_says_layout():
    kept = instance('1g.10gb', 6, 13)
    records = [{'host': 'a', 'started': True, 'error': None, 'decision': {
        'in_layout': False, 'pods_to_evict': [], 'gpus': [gpu(0, DAY, [instance('3g.40gb', 0), kept])]}}]
    plan = fleet_plan(records, 'mixed')
    assert plan['lines'][0] == 'a GPU 0: 7x1g.10gb -> 1x3g.40gb + 1x1g.10gb (6 instance(s) destroyed, 1 kept)'
    assert plan['lines'][-1].startswith('layout mixed: 1 of 1 host(s) evaluated, 1 to change')
    assert plan['check_mode'] is False and plan['totals']['instances_created'] == 1


def test_a_refusal_common_to_the_fleet_is_told_once_and_outcomes_say_what_happened():
    """Issue 39: one line per distinct reason; unreachable is not reached, a failure after a GPU change is failed, a
    host whose boot persistence failed is changed with a warning, a pending boot persistence is a change."""
    nothing = 'the layout matches none of its MIG-capable GPUs'
    applied = {'in_layout': False, 'pods_to_evict': [], 'gpus': [gpu(0, DAY, NIGHT)]}
    records = [{'host': 'h%02d' % n, 'started': True, 'decision': None, 'error': nothing} for n in range(12)]
    records += [
        {'host': 'lost', 'started': True, 'decision': None, 'unreachable': True, 'error': 'unreachable: ssh'},
        {'host': 'half', 'started': True, 'decision': None, 'gpus_changed': True, 'error': 'NVML_ERROR_UNKNOWN'},
        {'host': 'warn', 'started': True, 'error': None, 'decision': applied, 'persistence_error': 'systemctl daemon-reload failed'},
        {'host': 'unit', 'started': True, 'error': None, 'decision': {
            'in_layout': True, 'gpus': [], 'pods_to_evict': [], 'persistence': {'pending': ['gpufleet-mig-layout.service']}}},
    ]
    plan = fleet_plan(records, 'nighttime')
    assert [h['status'] for h in plan['hosts'][12:]] == ['not reached', 'failed', 'change', 'change']
    assert plan['failed'] == {'half': 'NVML_ERROR_UNKNOWN'} and plan['warnings'] == {'warn': 'boot persistence failed: systemctl daemon-reload failed'}
    assert [line for line in plan['lines'] if nothing in line] == [
        '12 hosts (h00, h01, h02, h03, h04, h05, h06, h07, h08, h09 and 2 more): refused: ' + nothing]
    assert 'half: failed after a GPU may have changed: NVML_ERROR_UNKNOWN' in plan['lines']
    assert 'warn: applied, boot persistence failed: systemctl daemon-reload failed' in plan['lines']
    assert 'unit: boot persistence to install (through systemctl, no GPU changes): gpufleet-mig-layout.service' in plan['lines']
    assert plan['lines'][-1].endswith('; 1 applied with a warning (boot persistence failed)')
    assert plan['totals']['hosts_not_reached'] == 1 and plan['totals']['hosts_refused'] == 12
    every = fleet_plan([{'host': h, 'started': True, 'decision': None, 'error': nothing} for h in 'ab'], 'n')
    assert every['lines'][0] == 'every host (2): refused: ' + nothing

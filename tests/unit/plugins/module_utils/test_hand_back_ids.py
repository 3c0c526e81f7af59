# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the hand-back compares before a node goes back into service, in every mode the role takes (issue 43).

Every mode destroys and recreates instances (a repack's move too: a recreated instance has a new UUID), so a
node uncordoned while the kubelet still advertises a gone id hands a pod a device that does not exist. The
table of _node_handover.pod_resources_use is pinned row by row below, each row named after its mode, with the
inputs the role gives it in that mode (roles/mig_layout/vars/main.yml: the decision, ``mig_layout__final``, the
repack flag); the property then says it for every generated mode: wherever the apply names the device ids it
expects and the decision read the kubelet, the ids are compared. A change that turns the comparison off for
one mode fails the row, and the property, naming that mode.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _node_handover as h

EXPECTED = {'nvidia.com/mig-1g.10gb': {'uuid': ['MIG-a', 'MIG-b'], 'index': ['0:0', '0:1']}}


def _decision(read, ids=True):
    """nvidia_mig_layout's decision (apply: false) as the role registers it: pod-resources read or not."""
    result = {'in_layout': False, 'pod_resources': {'read': read} if read else {'read': False, 'reason': 'no socket'}}
    if ids:
        result['expected_device_ids'] = EXPECTED
    return result


def _applied(ids=True):
    """An apply's result (nvidia_mig_layout, or nvidia_mig_repack after its moves)."""
    return {'changed': True, 'resources': {'nvidia.com/mig-1g.10gb': 2}, 'expected_device_ids': EXPECTED} if ids else {
        'changed': True, 'resources': {'nvidia.com/mig-1g.10gb': 2}}


def _repack_decision():
    """repack_apply.yml's decision: nobody to evict, the pod-resources the repack's plan read (required on a node)."""
    return {'pods_to_evict': [], 'pod_resources': {'read': True}}


# name, SwitchMode's mode for those inputs, (switch, drain_fallback, repack, create_only), the decision, the role's
# mig_layout__final (None: the decision itself), and the outputs (decide, apply, compare_ids).
ROWS = [
    ('in place', 'in_place', ('in_place', False, False, False), _decision(True), _applied(), ('required', 'required', True)),
    ('in place, drain fallback allowed', 'in_place', ('in_place', True, False, False), _decision(True), _applied(),
     ('auto', 'auto', True)),
    ('create-only', 'create_only', ('in_place', False, False, True), _decision(True), _applied(), ('required', 'required', True)),
    ('create-only, drain fallback allowed', 'create_only', ('in_place', True, False, True), _decision(True), _applied(),
     ('auto', 'auto', True)),
    ('drain chosen', 'drain', ('drain', False, False, False), _decision(True), _applied(), ('auto', 'auto', True)),
    ('drain chosen, fallback allowed', 'drain', ('drain', True, False, False), _decision(True), _applied(), ('auto', 'auto', True)),
    # (1) of the table: the kubelet's ids come through the socket that did not answer; only counts are left.
    ('drain chosen, kubelet not read', 'drain', ('drain', False, False, False), _decision(False), _applied(), ('auto', 'off', False)),
    ('drain as the fallback', 'drain', ('in_place', True, False, False), _decision(False), _applied(), ('auto', 'off', False)),
    ('repack', 'repack', ('in_place', False, True, False), _repack_decision(), _applied(), ('required', 'required', True)),
    ('repack, switch drain', 'repack', ('drain', True, True, False), _repack_decision(), _applied(), ('required', 'required', True)),
    # The reboot path: mig_layout__final is the apply after the reboot (or the one that declared it), as the mode decided.
    ('reboot path, in place', 'in_place', ('in_place', False, False, False), _decision(True), dict(_applied(), reboot_required=False),
     ('required', 'required', True)),
    ('reboot path, drain', 'drain', ('drain', False, False, False), _decision(True), dict(_applied(), reboot_required=False),
     ('auto', 'auto', True)),
    ('reboot path, drain as the fallback', 'drain', ('in_place', True, False, False), _decision(False), _applied(),
     ('auto', 'off', False)),
    # Already in the layout (k8s_recover.yml): mig_layout__final is the decision itself, which names the ids.
    ('in the layout, in place', 'in_place', ('in_place', False, False, False), _decision(True), None, ('required', 'required', True)),
    ('in the layout, drain', 'drain', ('drain', False, False, False), _decision(True), None, ('auto', 'auto', True)),
    # (2) of the table: an apply that names no ids leaves counts, whatever the mode.
    ('in place, no ids named', 'in_place', ('in_place', False, False, False), _decision(True), _applied(ids=False),
     ('required', 'required', False)),
    ('drain chosen, no ids named', 'drain', ('drain', False, False, False), _decision(True), _applied(ids=False), ('auto', 'auto', False)),
    ('repack, no ids named', 'repack', ('in_place', False, True, False), _repack_decision(), _applied(ids=False),
     ('required', 'required', False)),
]


@pytest.mark.parametrize('name, mode, inputs, decision, final, outputs', ROWS, ids=[row[0] for row in ROWS])
def test_each_mode_reads_pod_resources_and_compares_as_its_row_says(name, mode, inputs, decision, final, outputs):
    switch, fallback, repack, create_only = inputs
    decided = h.SwitchMode(switch, decision['pod_resources'], fallback, repack, create_only)
    assert decided.problem() is None and decided.mode == mode, (name, decided.as_dict())
    applied = decision if final is None else final
    got = h.pod_resources_use(True, switch, fallback, decision, applied, repack)
    assert (got['decide'], got['apply'], got['compare_ids']) == outputs, name


def test_every_mode_the_role_takes_has_a_row_that_compares_ids():
    assert {mode for dummy, mode, dummy_inputs, dummy_decision, dummy_final, outputs in ROWS if outputs[2]} == {
        'in_place', 'create_only', 'drain', 'repack'}


def test_off_kubernetes_the_host_reads_the_kubelet_where_one_runs():
    for switch in h.SWITCHES:
        for fallback in (False, True):
            got = h.pod_resources_use(False, switch, fallback, _decision(False), _applied())
            assert (got['decide'], got['apply']) == ('auto', 'auto')
    assert h.pod_resources_use(False, 'in_place', False, repack=True)['decide'] == 'auto'


def test_the_users_mode_is_the_mode_off_kubernetes_and_only_stricter_on_a_node():
    """mig_layout_k8s_pod_resources: off a node it is what the modules get; on a node required makes every mode read
    the kubelet or fail, and off is refused (the hand-over must know which pod holds which instance)."""
    for requested in h.POD_RESOURCES_MODES:
        got = h.pod_resources_use(False, 'in_place', False, requested=requested)
        assert (got['decide'], got['apply']) == (requested, requested)
    for switch in h.SWITCHES:
        for fallback in (False, True):
            for repack in (False, True):
                default = h.pod_resources_use(True, switch, fallback, repack=repack)
                assert h.pod_resources_use(True, switch, fallback, repack=repack, requested='auto') == default
                assert h.pod_resources_use(True, switch, fallback, repack=repack, requested='required')['decide'] == 'required'
                with pytest.raises(h.HandoverError, match='mig_layout_k8s_pod_resources=off on a Kubernetes node'):
                    h.pod_resources_use(True, switch, fallback, repack=repack, requested='off')
    with pytest.raises(h.HandoverError, match='must be one of auto, required, off'):
        h.pod_resources_use(False, 'in_place', False, requested='sometimes')


def test_before_the_decision_only_how_it_reads_is_decided():
    got = h.pod_resources_use(True, 'in_place', False)
    assert got == {'decide': 'required', 'apply': 'required', 'compare_ids': False}
    with pytest.raises(h.HandoverError, match='must be one of in_place, drain'):
        h.pod_resources_use(True, 'evict-all', False)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(switch=st.sampled_from(h.SWITCHES), fallback=st.booleans(), repack=st.booleans(), create_only=st.booleans(),
       read=st.booleans(), names_ids=st.booleans(), path=st.sampled_from(['change', 'reboot', 'in the layout']))
def test_wherever_the_apply_names_its_ids_and_the_kubelet_was_read_the_hand_back_compares_ids(
        switch, fallback, repack, create_only, read, names_ids, path):
    decision = _repack_decision() if repack else _decision(read, ids=names_ids)
    read = decision['pod_resources']['read']
    if repack:
        path = 'change'   # a repack neither reboots nor recovers: its result is the apply's
    mode = h.SwitchMode(switch, decision['pod_resources'], fallback, repack, create_only)
    if mode.problem() is not None:
        return   # refused before the cordon: no hand-back
    final = {'change': _applied(names_ids), 'reboot': dict(_applied(names_ids), reboot_required=False),
             'in the layout': decision}[path]
    got = h.pod_resources_use(True, switch, fallback, decision, final, repack)
    if names_ids and read:
        assert got['compare_ids'], 'mode %s (%s): the apply names its ids, the hand-back must compare them' % (mode.mode, path)
    else:
        # Nothing to compare with: no ids named (2), or the kubelet's socket did not answer the decision (1).
        assert not got['compare_ids'], 'mode %s (%s)' % (mode.mode, path)
    # Whatever the mode, an apply after a decision that read the kubelet reads it again under the host lock.
    assert got['apply'] == ('off' if not read else got['decide']), 'mode %s' % mode.mode

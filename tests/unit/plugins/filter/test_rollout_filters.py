# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pre-flight filters of playbooks/mig_layout.yml return one line per problem instead of raising;
the fleet-plan filter reads the facts the rollout and the role leave on each host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import json

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter import mig_layout as layout_filters
from ansible_collections.gpufleet.mig.plugins.filter.mig_layout import FilterModule
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import LayoutConfigError, check_layout, unknown_layout, validate_configs

FILTERS = FilterModule().filters()
CATALOG = {
    'daytime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g': 'max'}}],
    'nighttime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'3g': 2}}],
}


def test_unknown_layout_names_the_closest_one():
    assert unknown_layout('nightime', CATALOG) == \
        "layout 'nightime' is not defined; did you mean nighttime? (defined: daytime, nighttime)"
    assert unknown_layout('weekend', CATALOG) == "layout 'weekend' is not defined (defined: daytime, nighttime)"
    assert unknown_layout('x', {}) == "layout 'x' is not defined (defined: none)"
    with pytest.raises(LayoutConfigError, match='did you mean daytime[?]'):
        check_layout(validate_configs(CATALOG), 'Daytime')


def test_catalog_filter_returns_the_error_as_one_line():
    checked = FILTERS['mig_layout_catalog'](CATALOG, 'nightime')
    assert checked == {'name': 'nightime', 'configs': None, 'matches': None,
                       'error': "layout 'nightime' is not defined; did you mean nighttime? (defined: daytime, nighttime)"}
    good = FILTERS['mig_layout_catalog'](CATALOG, 'nighttime')
    assert good['error'] is None and good['configs']['nighttime'][0]['mig-devices'] == {'3g': 2}


def test_yaml_error_names_the_file_and_the_line():
    text = 'version: v1\nmig-configs:\n  nighttime:\n    - devices: all\n      mig-enabled: [true\n'
    checked = FILTERS['mig_layout_catalog'](text, 'nighttime', True, 'files/site.yaml')
    assert checked['configs'] is None
    assert checked['error'].startswith('files/site.yaml line 6, column 1: not valid YAML: ')
    assert '\n' not in checked['error']
    with pytest.raises(AnsibleFilterError, match='^files/site.yaml line 6, column 1: not valid YAML'):
        FILTERS['mig_layout_validate'](text, 'nighttime', True, 'files/site.yaml')
    # A file that loads but breaks a rule is named too; the text is read as a whole v1 file.
    bad = 'version: v1\nmig-configs:\n  n:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {3g: 2, x: 1}\n'
    assert FILTERS['mig_layout_catalog'](bad, 'n', False, 'site.yaml')['error'].startswith(
        "site.yaml: layout n entry 0: mig-devices key x is not a MIG profile: invalid format for 'x'")
    good = 'version: v1\nmig-configs:\n  n:\n    - devices: all\n      mig-enabled: false\n'
    assert FILTERS['mig_layout_catalog'](good, 'n', False, 'site.yaml')['error'] is None


@pytest.mark.parametrize('key, reason', [
    ('1g.10bg', "invalid format for '1g.10bg'"),        # refused when the file loads (mig-parted's format check)
    ('1g.10gb+mee', "invalid MIG profile '1g.10gb+mee'"),  # loads, refused for the layout being applied
])
def test_a_profile_typo_has_one_wording_whoever_reads_it(key, reason):
    """The role (this filter) and the module (check_layout after validate_configs) give the same message."""
    configs = {'n': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {key: 1}}]}
    expected_start = 'layout n entry 0: mig-devices key %s is not a MIG profile: %s' % (key, reason)
    role = FILTERS['mig_layout_catalog'](configs, 'n')['error']
    with pytest.raises(LayoutConfigError) as module:
        check_layout(validate_configs(configs), 'n')
    assert role == str(module.value)
    assert role.startswith(expected_start)
    assert role.endswith('(a MIG profile such as 1g.10gb or 1c.3g.40gb, or a model-agnostic shape such as 1g or 1c.3g)')


@pytest.mark.parametrize('devices, message', [
    ({'3g': 3}, 'mig-devices 3g x3 need 9 compute slices, more than any MIG GPU has (7): no GPU of any model fits it'),
    ({'1g.10gb': 8}, 'mig-devices 1g.10gb x8 need 8 compute slices'),
    ({'4g': 1, '3g': 1, '1g': 1}, 'mig-devices 1g x1 + 3g x1 + 4g x1 need 8 compute slices'),
])
def test_a_count_no_gpu_of_any_model_fits_is_refused_on_the_controller(devices, message):
    configs = {'n': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': devices}]}
    error = FILTERS['mig_layout_catalog'](configs, 'n')['error']
    assert error.startswith('layout n entry 0: ' + message), error


@pytest.mark.parametrize('devices', [{'1g': 7}, {'3g': 2}, {'4g': 1, '3g': 1}, {'2g': 3, '1g': 1}, {'1g': 'max', '3g': 2},
                                     {'1c.3g': 6}])
def test_counts_some_gpu_fits_pass(devices):
    configs = {'n': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': devices}]}
    assert FILTERS['mig_layout_catalog'](configs, 'n')['error'] is None


def test_a_catalog_text_is_parsed_by_libyaml_where_pyyaml_has_it_with_the_same_data_and_wording(monkeypatch):
    """The C parser reads the text where PyYAML was built with it (once per host of a pre-flight); the data is the
    pure-Python parser's, and a syntax error is told in the pure-Python parser's words whatever the build."""
    fast_loader = getattr(yaml, 'CSafeLoader', None)
    assert layout_filters._FAST_LOADER is fast_loader
    with open(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'mig_layout', 'files', 'catalog.yml')) as handle:
        shipped = handle.read()
    broken = 'version: v1\nmig-configs:\n  nighttime:\n    - devices: all\n      mig-enabled: [true\n'
    loaders = []
    real_load = yaml.load

    def load(text, Loader):
        loaders.append(Loader)
        return real_load(text, Loader=Loader)

    monkeypatch.setattr(yaml, 'load', load)

    def both():
        return (FILTERS['mig_layout_catalog'](shipped, 'nighttime', True, 'catalog.yml'),
                FILTERS['mig_layout_catalog'](broken, 'nighttime', True, 'files/site.yaml'))

    fast = both()
    assert loaders == ([yaml.SafeLoader] * 2 if fast_loader is None else [fast_loader, fast_loader, yaml.SafeLoader])
    monkeypatch.setattr(layout_filters, '_FAST_LOADER', None)
    assert both() == fast
    assert fast[0]['error'] is None and fast[1]['error'].startswith('files/site.yaml line 6, column 1: not valid YAML: ')


def test_preflight_tells_each_problem_once_with_its_hosts():
    hosts = ['a', 'b', 'c']
    same = {'error': "layout 'nightime' is not defined; did you mean nighttime? (defined: daytime, nighttime)"}
    assert FILTERS['mig_layout_preflight']([same, same, same], hosts) == (
        "Nothing was changed: layout 'nightime' is not defined; did you mean nighttime? (defined: daytime, nighttime) "
        "[every host of the play]")
    other = {'error': 'site.yaml line 3, column 1: not valid YAML: x'}
    assert FILTERS['mig_layout_preflight']([same, {'error': None}, other], hosts) == (
        "Nothing was changed: layout 'nightime' is not defined; did you mean nighttime? (defined: daytime, nighttime) [a]"
        " | site.yaml line 3, column 1: not valid YAML: x [c]")
    assert FILTERS['mig_layout_preflight']([{'error': None}] * 3, hosts) == ''


def test_rollout_settings_filter_does_not_raise():
    assert FILTERS['mig_layout_rollout_settings']('50%', '25%') == {'serial': '50%', 'max_fail_percentage': 25, 'error': None}
    bad = FILTERS['mig_layout_rollout_settings'](0, 0)
    assert bad['serial'] is None and bad['error'].startswith('mig_layout_serial must be a whole number')
    assert FILTERS['mig_layout_rollout_settings'](1, 'abc')['error'].startswith('mig_layout_max_fail_percentage must be')


def test_progress_filter():
    settings = {'serial': 1, 'max_fail_percentage': 0}
    line = FILTERS['mig_layout_rollout_progress'](['b'], ['a', 'b', 'c'], settings, {'a': 'x'}.keys())['line']
    assert line == 'batch 2 of 3: 2 of 3 host(s) done, 1 failed (a); failure budget spent: the rollout stops here'


def test_fleet_plan_filter_reads_each_hosts_facts():
    decision = {'in_layout': True, 'gpus': [], 'pods_to_evict': []}
    hostvars = {
        'a': {'mig_layout_rollout_started': True, 'mig_layout__decision': decision},
        # The role's reason (not the rollout's longer message) is the reason told; whitespace folded, no final dot.
        'b': {'mig_layout_rollout_started': True, 'mig_layout__decision': {'failed': True, 'msg': 'x'},
              'mig_layout__failure_reason': ' GPU 0: busy\n  [4242].\n', 'mig_layout_rollout_error': 'MIG layout n was not applied'},
        'c': {'mig_layout_rollout_started': True, 'mig_layout_rollout_error': 'unreachable'},
        'd': {},
    }
    plan = FILTERS['mig_layout_fleet_plan'](['a', 'b', 'c', 'd'], hostvars, 'n', True)
    assert plan['refused'] == {'b': 'GPU 0: busy [4242]', 'c': 'unreachable'}
    assert plan['not_reached'] == ['d']
    assert plan['totals']['hosts_in_layout'] == 1 and plan['check_mode'] is True


def test_instances_filter_writes_them_as_the_plan_does():
    gpu_instances = [{'profile': '1g.10gb'}, {'profile': '3g.40gb'}, {'profile': '1g.10gb'}]
    assert FILTERS['mig_layout_instances'](gpu_instances) == '1x3g.40gb + 2x1g.10gb'
    assert FILTERS['mig_layout_instances']([]) == 'no instances'


A100_DECISION = {
    'gpus': [{'index': 1, 'pci_device_id': '0x20B210DE', 'free_space_after': {'total_slices': 8}},
             {'index': 0, 'pci_device_id': '0x20B210DE', 'free_space_after': None}],
    'unmatched_gpus': [{'index': 2, 'pci_device_id': '0x20B710DE', 'reason': 'matched by no entry'}],
    'skipped_gpus': [{'index': 3, 'name': 'NVIDIA L40S'}],
}


def test_host_gpus_from_a_decision():
    assert FILTERS['mig_layout_host_gpus'](A100_DECISION) == [
        {'index': 0, 'name': None, 'pci_device_id': '0x20B210DE', 'pci_subsystem_id': None, 'memory_slices': None},
        {'index': 1, 'name': None, 'pci_device_id': '0x20B210DE', 'pci_subsystem_id': None, 'memory_slices': 8},
        {'index': 2, 'name': None, 'pci_device_id': '0x20B710DE', 'pci_subsystem_id': None, 'memory_slices': None},
    ]
    # A refusal of a layout that matches none of its GPUs names them (the pre-flight's fleet check needs them);
    # nothing else that is not a decision tells any GPU, not even "none".
    refusal = {'failed': True, 'msg': 'layout n matches none of the MIG-capable GPUs of this host (...)',
               'unmatched_gpus': A100_DECISION['unmatched_gpus']}
    assert FILTERS['mig_layout_host_gpus'](refusal) == [
        {'index': 2, 'name': None, 'pci_device_id': '0x20B710DE', 'pci_subsystem_id': None, 'memory_slices': None}]
    for told_nothing in (None, {'skipped': True, 'changed': False}, {'unreachable': True, 'msg': 'gone'},
                         {'failed': True, 'msg': 'NVML: driver not loaded'}, 'a text'):
        assert FILTERS['mig_layout_host_gpus'](told_nothing) is None, told_nothing


def test_host_gpus_from_the_nvidia_mig_facts_leave_out_gpus_without_mig():
    """Without a fact cache the pre-flight reads the facts (playbooks/mig_layout.yml): every GPU is listed there."""
    facts = {'layout': None, 'gpus': [
        {'index': 0, 'name': 'NVIDIA A30', 'pci_device_id': '0x20B710DE', 'pci_subsystem_id': '0x153210DE', 'mig_capable': True},
        {'index': 1, 'name': 'NVIDIA L40S', 'pci_device_id': '0x26B910DE', 'pci_subsystem_id': None, 'mig_capable': False}]}
    assert FILTERS['mig_layout_host_gpus'](facts) == [
        {'index': 0, 'name': 'NVIDIA A30', 'pci_device_id': '0x20B710DE', 'pci_subsystem_id': '0x153210DE', 'memory_slices': None}]


def entry_of(**fields):
    entry = {'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g': 1}}
    entry.update(fields)
    return entry


@pytest.mark.parametrize('entry, matches', [
    (entry_of(), True),
    (entry_of(**{'device-filter': '0x233010DE'}), False),                 # an H100 filter on A100/A30 GPUs
    (entry_of(**{'device-filter': ['0x233010DE', '0x20B710DE']}), True),   # the A30 (unmatched by its last layout)
    (entry_of(devices=[5]), False),
    (entry_of(devices=[1], **{'gpufleet-memory-slices': 4}), False),      # GPU 1 has 8 memory slices
    (entry_of(devices=[0], **{'gpufleet-memory-slices': 4}), True),       # GPU 0's are not known yet: it may
    (entry_of(**{'device-filter': '0x20B210DE:0x1234', 'devices': [1]}), True),  # subsystem unknown: it may
])
def test_a_layout_may_match_the_known_gpus(entry, matches):
    gpus = FILTERS['mig_layout_host_gpus'](A100_DECISION)
    checked = FILTERS['mig_layout_catalog']({'n': [entry]}, 'n', False, None, gpus)
    assert checked['error'] is None and checked['matches'] is matches
    assert FILTERS['mig_layout_catalog']({'n': [entry]}, 'n')['matches'] is None


def test_preflight_refuses_a_layout_no_known_gpu_of_any_host_matches():
    layout = {'n': [{'devices': 'all', 'device-filter': '0xDEADBEEF', 'mig-enabled': True, 'mig-devices': {'1g': 1}}]}
    a100s = FILTERS['mig_layout_host_gpus']({'gpus': [
        {'index': 0, 'name': 'NVIDIA A100-SXM4-80GB', 'pci_device_id': '0x20B210DE', 'mig_capable': True}]})
    nowhere = FILTERS['mig_layout_catalog'](layout, 'n', False, None, a100s)
    elsewhere = FILTERS['mig_layout_catalog'](layout, 'n', False, None, FILTERS['mig_layout_host_gpus'](A100_DECISION))
    somewhere = {'name': 'n', 'error': None, 'matches': True}
    unknown = FILTERS['mig_layout_catalog'](layout, 'n')
    assert nowhere['matches'] is False and unknown['matches'] is None
    assert FILTERS['mig_layout_preflight']([nowhere, elsewhere], ['a', 'b']) == (
        'Nothing was changed: layout n (device-filters: entry 0 0xDEADBEEF) matches no GPU of any host of the play '
        '(their MIG-capable GPUs: 0x20B210DE, 0x20B710DE, NVIDIA A100-SXM4-80GB 0x20B210DE): it would be declared '
        'everywhere and applied nowhere; check its device-filter, devices and gpufleet-memory-slices')
    assert FILTERS['mig_layout_preflight']([nowhere, somewhere], ['a', 'b']) == ''
    # A host whose GPUs are not known yet may match: no refusal.
    assert FILTERS['mig_layout_preflight']([nowhere, unknown], ['a', 'b']) == ''


class RawHostvars(dict):
    """ansible-core's HostVars as the pre-flight filter reads it: raw_get(host), the host's variables untemplated."""

    def raw_get(self, host):
        return self[host]


def test_preflight_completes_the_checks_made_before_the_gpus_were_read():
    """The pre-flight's second check, once on the controller: each host's first check (its GPUs unknown then)
    completed with the nvidia_mig facts read since; a check that knew its GPUs keeps its answer."""
    layout = {'n': [{'devices': 'all', 'device-filter': '0xDEADBEEF', 'mig-enabled': True, 'mig-devices': {'1g': 1}}]}
    a100_facts = {'gpus': [{'index': 0, 'name': 'NVIDIA A100-SXM4-80GB', 'pci_device_id': '0x20B210DE', 'mig_capable': True},
                           {'index': 1, 'name': 'NVIDIA L40S', 'pci_device_id': '0x26B910DE', 'mig_capable': False}]}
    unknown = FILTERS['mig_layout_catalog'](layout, 'n')
    read = RawHostvars(a={'nvidia_mig': a100_facts}, b={'nvidia_mig': a100_facts}, c={})
    refusal = ('Nothing was changed: layout n (device-filters: entry 0 0xDEADBEEF) matches no GPU of any host of the '
               'play (their MIG-capable GPUs: NVIDIA A100-SXM4-80GB 0x20B210DE): it would be declared everywhere and '
               'applied nowhere; check its device-filter, devices and gpufleet-memory-slices')
    assert FILTERS['mig_layout_preflight']([unknown, unknown], ['a', 'b'], read) == refusal
    # Without hostvars the same checks may match (the first check, before the read).
    assert FILTERS['mig_layout_preflight']([unknown, unknown], ['a', 'b']) == ''
    # A host that could not be read (no facts) may still match: no refusal.
    assert FILTERS['mig_layout_preflight']([unknown, unknown], ['a', 'c'], read) == ''
    # A check that knew its host's GPUs is not read again: here it matched, so nothing is refused.
    assert FILTERS['mig_layout_preflight']([unknown, dict(unknown, matches=True)], ['a', 'b'], read) == ''
    # A catalog problem is told as it was, whatever was read.
    broken = {'name': 'n', 'configs': None, 'error': 'layout n is wrong', 'matches': None}
    assert FILTERS['mig_layout_preflight']([broken, unknown], ['a', 'b'], read) == 'Nothing was changed: layout n is wrong [a]'
    # A plain mapping (no raw_get) is read the same way.
    assert FILTERS['mig_layout_preflight']([unknown, unknown], ['a', 'b'], dict(read)) == refusal
    # The playbook's read keeps the summary (nvidia_mig_facts summary: true), not the facts: the same refusal from it.
    summary = {'map': json.dumps([dict(gpu, uuid='GPU-%d' % gpu['index'], pci_subsystem_id=None) for gpu in a100_facts['gpus']])}
    summarised = RawHostvars(a={'nvidia_mig_summary': summary}, b={'nvidia_mig_summary': summary})
    assert FILTERS['mig_layout_preflight']([unknown, unknown], ['a', 'b'], summarised) == refusal
    # A summary made before it carried the PCI ids tells no GPU: no refusal on a guess.
    old = {'map': json.dumps([dict((k, v) for k, v in gpu.items() if k != 'pci_device_id') for gpu in a100_facts['gpus']])}
    older = RawHostvars(a={'nvidia_mig_summary': old}, b={'nvidia_mig_summary': old})
    assert FILTERS['mig_layout_preflight']([unknown, unknown], ['a', 'b'], older) == ''
    # The pre-flight's first decisions tell the GPUs first, a refusal of the host included (its unmatched_gpus); what the
    # host keeps from an earlier run does not outweigh them.
    h200s = ('Nothing was changed: layout n (device-filters: entry 0 0xDEADBEEF) matches no GPU of any host of the play '
             '(their MIG-capable GPUs: NVIDIA H200 0x233510DE): it would be declared everywhere and applied nowhere; '
             'check its device-filter, devices and gpufleet-memory-slices')
    stale = FILTERS['mig_layout_host_gpus'](A100_DECISION)
    decided = RawHostvars(a={'mig_layout__decision': REFUSAL, 'mig_layout_host_gpus': stale}, b={'mig_layout__decision': REFUSAL})
    assert FILTERS['mig_layout_preflight']([unknown, unknown], ['a', 'b'], decided) == h200s
    # A decision that told nothing (skipped on a Kubernetes node, failed otherwise) leaves the other sources.
    skipped = RawHostvars(a={'mig_layout__decision': {'skipped': True}, 'nvidia_mig_summary': summary},
                          b={'mig_layout__decision': {'failed': True, 'msg': 'x'}, 'nvidia_mig': a100_facts})
    assert FILTERS['mig_layout_preflight']([unknown, unknown], ['a', 'b'], skipped) == refusal
    # Matched GPUs of a decision that succeeded make the layout match: no refusal.
    matched = RawHostvars(a={'mig_layout__decision': REFUSAL}, b={'mig_layout__decision': {'gpus': [
        {'index': 0, 'name': 'NVIDIA A100', 'pci_device_id': '0xDEADBEEF'}], 'unmatched_gpus': []}})
    assert FILTERS['mig_layout_preflight']([unknown, unknown], ['a', 'b'], matched) == ''


def test_a_catalog_file_the_lookup_could_not_read_is_one_line_told_once_for_every_host():
    """validate.yml reads the file with errors='ignore': the lookup gives None, and the pre-flight tells it once."""
    checked = FILTERS['mig_layout_catalog'](None, 'nighttime', True, 'site/missing.yml')
    assert checked['configs'] is None and checked['matches'] is None
    assert checked['error'] == (
        'the MIG layout catalog site/missing.yml cannot be read on the controller (no such file, or not readable); '
        'mig_layout_config_file is a path on the controller, absolute or relative to the playbook')
    assert FILTERS['mig_layout_preflight']([checked] * 3, ['a', 'b', 'c']) == (
        'Nothing was changed: %s [every host of the play]' % checked['error'])


REFUSAL = {'failed': True, 'msg': 'layout n matches none of the MIG-capable GPUs of this host (...)', 'gpus_changed': False,
           'unmatched_gpus': [{'index': 0, 'name': 'NVIDIA H200', 'pci_device_id': '0x233510DE', 'reason': 'matched by no entry'}]}


def test_the_rollout_keeps_the_gpus_only_of_the_hosts_whose_decision_told_new_ones():
    """playbooks/mig_layout.yml sets mig_layout_host_gpus on these hosts only: a decision that succeeded, or refused a
    layout that matches none of the host's GPUs, and told other GPUs than the host keeps; a decision that failed
    otherwise, one that could not reach its host or was skipped (a Kubernetes node), or none, keeps the old."""
    kept = FILTERS['mig_layout_host_gpus'](A100_DECISION)
    hostvars = RawHostvars(
        known={'mig_layout__decision': A100_DECISION, 'mig_layout_host_gpus': kept},
        new={'mig_layout__decision': A100_DECISION},
        moved={'mig_layout__decision': A100_DECISION, 'mig_layout_host_gpus': kept[:1]},
        refused={'mig_layout__decision': REFUSAL},
        refused_known={'mig_layout__decision': REFUSAL, 'mig_layout_host_gpus': FILTERS['mig_layout_host_gpus'](REFUSAL)},
        failed={'mig_layout__decision': {'failed': True, 'msg': 'NVML: driver not loaded'}},
        lost={'mig_layout__decision': {'unreachable': True, 'msg': 'gone'}},
        node={'mig_layout__decision': {'skipped': True, 'changed': False}},
        untouched={'mig_layout_host_gpus': kept},
    )
    hosts = ['known', 'new', 'moved', 'refused', 'refused_known', 'failed', 'lost', 'node', 'untouched']
    assert FILTERS['mig_layout_host_gpus_changed'](hosts, hostvars) == ['new', 'moved', 'refused']
    assert FILTERS['mig_layout_host_gpus_changed'](hosts, dict(hostvars)) == ['new', 'moved', 'refused']


def test_the_preflight_reads_only_the_hosts_whose_gpus_the_controller_knows_in_no_way():
    """A cached mig_layout_host_gpus, nvidia_mig facts (even empty ones) or an nvidia_mig_summary that tells the GPUs'
    PCI ids make a host known; a summary without them (older) or that cannot be read does not. The filter answers in
    the order of the hosts it is given, and works on a plain dict of each host's variables as well."""
    gpu = {'index': 0, 'uuid': 'GPU-0', 'name': 'NVIDIA A30', 'mig_capable': True}
    hostvars = RawHostvars(
        cached={'mig_layout_host_gpus': FILTERS['mig_layout_host_gpus'](A100_DECISION)},
        read={'nvidia_mig': {'gpus': []}},
        both={'mig_layout_host_gpus': [], 'nvidia_mig': {'gpus': []}},
        summarised={'nvidia_mig_summary': {'map': json.dumps([dict(gpu, pci_device_id='0x20B710DE', pci_subsystem_id=None)])}},
        old_summary={'nvidia_mig_summary': {'map': json.dumps([gpu])}},
        broken_summary={'nvidia_mig_summary': {'map': '[{'}},
        fresh={'ansible_host': '10.0.0.9'},
        other_fresh={},
        # The pre-flight's first decision of this run: what it told counts, a skipped one (a Kubernetes node) does not.
        decided={'mig_layout__decision': A100_DECISION},
        refused={'mig_layout__decision': REFUSAL},
        node={'mig_layout__decision': {'skipped': True, 'changed': False}},
        cached_node={'mig_layout__decision': {'skipped': True, 'changed': False}, 'mig_layout_host_gpus': []},
        failed={'mig_layout__decision': {'failed': True, 'msg': 'NVML: driver not loaded'}},
    )
    hosts = ['other_fresh', 'cached', 'read', 'summarised', 'old_summary', 'fresh', 'both', 'broken_summary',
             'decided', 'refused', 'node', 'cached_node', 'failed']
    unknown = ['other_fresh', 'old_summary', 'fresh', 'broken_summary', 'node', 'failed']
    assert FILTERS['mig_layout_gpus_unknown'](hosts, hostvars) == unknown
    assert FILTERS['mig_layout_gpus_unknown'](hosts, dict(hostvars)) == unknown
    assert FILTERS['mig_layout_gpus_unknown']([], hostvars) == []


def test_the_rollout_play_takes_the_hosts_whose_first_decision_did_not_settle_them():
    """mig_layout_to_change is _rollout_plan.hosts_to_change over hostvars (raw_get or a plain mapping); with its list,
    the fleet plan and the hosts the run fails count a host outside it as reached (its first decision found it in
    the layout), and a host of it as reached only where the rollout play marked it."""
    in_layout = {'changed': False, 'in_layout': True, 'gpus': [], 'unmatched_gpus': []}
    hostvars = RawHostvars(
        a={'mig_layout__decision': in_layout},
        b={'mig_layout__decision': {'in_layout': True, 'failed': True, 'msg': 'x'}},
        c={},
        d={'mig_layout__decision': in_layout},
    )
    hosts = ['a', 'b', 'c', 'd']
    assert FILTERS['mig_layout_to_change'](hosts, hostvars) == ['b', 'c']
    assert FILTERS['mig_layout_to_change'](hosts, dict(hostvars)) == ['b', 'c']
    # A dry run: a decision that found a host different is its answer too (the fleet plan reads it).
    hostvars['d']['mig_layout__decision'] = {'changed': False, 'in_layout': False, 'gpus': [], 'unmatched_gpus': []}
    assert FILTERS['mig_layout_to_change'](hosts, hostvars) == ['b', 'c', 'd']
    assert FILTERS['mig_layout_to_change'](hosts, hostvars, True) == ['b', 'c']
    hostvars['d']['mig_layout__decision'] = in_layout
    settings = FILTERS['mig_layout_rollout_settings'](1, 0)
    # b was reached and failed; the rollout stopped before c.
    hostvars['b'].update(mig_layout_rollout_started=True, mig_layout_rollout_error='b failed')
    unfinished = FILTERS['mig_layout_rollout_unfinished'](hosts, hostvars, settings, 'MIG layout n', ['b', 'c'])
    assert sorted(unfinished) == ['b', 'c'] and unfinished['b'] == 'b failed'
    assert sorted(FILTERS['mig_layout_rollout_unfinished'](hosts, hostvars, settings, 'MIG layout n')) == ['a', 'b', 'c', 'd']
    plan = FILTERS['mig_layout_fleet_plan'](hosts, hostvars, 'n', False, ['b', 'c'])
    assert plan['not_reached'] == ['c'] and plan['totals']['hosts_in_layout'] == 2
    assert FILTERS['mig_layout_fleet_plan'](hosts, hostvars, 'n')['not_reached'] == ['a', 'c', 'd']
    assert FILTERS['mig_layout_rollout_progress'](['b'], ['b', 'c'], settings, ['b'], False, 4)['line'].startswith(
        'batch 1 of 2: 1 of 2 host(s) done, 1 failed (b)')

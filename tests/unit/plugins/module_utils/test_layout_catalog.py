# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig-parted config loading, strict checks, GPU matching and per-GPU instances of the mig_layout role.

Each rule of mig-parted cites where it lives in NVIDIA/mig-parted (docs/mig_layout.md has the list).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os
import re
from dataclasses import replace

import pytest
import yaml

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import (
    LayoutConfigError,
    check_layout,
    layout_problems,
    validate_configs,
    validate_document,
    validate_file_or_configs,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances, shape_name
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import choose_entry, match_gpus, memory_slices_of, parse_device_id
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError, expand_layout
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog

from .catalogs import SHIPPED_CATALOG, model_gpu, read_simulated_host

CATALOG = SHIPPED_CATALOG
H100 = '0x233010DE'
A100_80 = '0x20B210DE'
A30 = '0x20B710DE'
ABSENT = object()


def load_catalog():
    with open(CATALOG) as handle:
        return validate_document(yaml.safe_load(handle))


def doc(*entries, **layouts):
    """A v1 document: positional entries form layout 'x'."""
    configs = dict(layouts)
    if entries:
        configs['x'] = list(entries)
    return {'version': 'v1', 'mig-configs': configs}


def entry(**fields):
    """An entry; keyword names use _ for - (device_filter -> device-filter)."""
    result = {'devices': 'all', 'mig-enabled': True, 'mig-devices': {}}
    for key, value in fields.items():
        result[key.replace('_', '-')] = value
    return result


def fake_gpu(index, pci_device_id, mig_capable=True, subsystem='0x16C110DE', name='NVIDIA GPU', profiles=()):
    """A GPU as the backend reports it, MIG disabled (no profiles) unless some are given."""
    return Gpu.from_dict({
        'index': index, 'uuid': 'GPU-%d' % index, 'name': name, 'pci_device_id': pci_device_id,
        'pci_subsystem_id': subsystem, 'mig_capable': mig_capable,
        'mig_mode': {'current': 'enabled' if profiles else 'disabled', 'pending': 'enabled' if profiles else 'disabled'},
        'profiles': list(profiles), 'profiles_known': bool(profiles), 'gpu_instances': []})


def on_index(gpu, index):
    return replace(gpu, index=index, uuid='GPU-%d' % index)


def disabled(model, index=0):
    """A GPU of ``model`` with MIG disabled, as the backend reads it (NVML hides the profiles)."""
    gpu = read_simulated_host([{'model': model}]).gpus[0]
    return on_index(gpu, index)


# ---- loading a file: api/spec/v1/spec.go ------------------------------------------------------

@pytest.mark.parametrize('document, configs', [
    (None, {}),                                             # an empty file: no layout
    ({'version': 'v1'}, {}),                                # version alone
    (doc(entry(mig_enabled=False, mig_devices=None)), {'x': [
        {'devices': 'all', 'device-filter': [], 'mig-enabled': False, 'mig-devices': {}}]}),
])
def test_documents_mig_parted_loads(document, configs):
    assert validate_document(document) == configs


@pytest.mark.parametrize('document, reason', [
    ([], 'must be a mapping'),
    ({}, "unsupported mig-parted config version ''"),
    ({'mig-configs': {'a': [entry()]}}, "no 'version' field"),
    ({'version': 'v2', 'mig-configs': {'a': [entry()]}}, "unsupported mig-parted config version 'v2'"),
    ({'version': 1, 'mig-configs': {'a': [entry()]}}, 'version must be a string'),
    ({'version': 'v1', 'mig-configs': {'a': [entry()]}, 'extra': 1}, 'unknown top-level key(s) extra'),
    ({'version': 'v1', 'mig-configs': {}}, "at least one entry in 'mig-configs' is required"),
    ({'version': 'v1', 'mig-configs': None}, "at least one entry in 'mig-configs' is required"),
    ({'version': 'v1', 'mig-configs': [entry()]}, 'mig-configs must be a mapping'),
    (doc(a=[]), "layout a: at least one entry in 'a' is required"),
    (doc(a=None), "at least one entry in 'a' is required"),
    (doc(a=entry()), 'layout a: must be a list of entries'),
])
def test_documents_mig_parted_refuses(document, reason):
    with pytest.raises(LayoutConfigError) as exc:
        validate_document(document)
    assert reason in str(exc.value)


def test_the_config_option_is_a_whole_file_or_its_mig_configs_mapping():
    """A mig-configs key or a string version makes a whole file (so a wrong version is told); else the mapping,
    where a layout may even be named version."""
    layouts = {'night': [entry()]}
    assert validate_file_or_configs(doc(night=[entry()])) == validate_configs(layouts)
    assert validate_file_or_configs(layouts) == validate_configs(layouts)
    assert validate_file_or_configs({'version': [entry()]}) == validate_configs({'version': [entry()]})
    with pytest.raises(LayoutConfigError, match="unsupported mig-parted config version 'v2'"):
        validate_file_or_configs({'version': 'v2', 'night': [entry()]})
    with pytest.raises(LayoutConfigError, match="no 'version' field"):
        validate_file_or_configs({'mig-configs': layouts})


def test_layout_names_are_any_yaml_key_as_mig_parted_reads_them():
    """sigs.k8s.io/yaml turns every key into a string: names are not limited to [A-Za-z0-9._-]."""
    document = yaml.safe_load('version: v1\nmig-configs:\n  "night shift/ü": [{devices: all, mig-enabled: false}]\n'
                              '  42: [{devices: all, mig-enabled: false}]\n  true: [{devices: all, mig-enabled: false}]\n')
    assert sorted(validate_document(document)) == ['42', 'night shift/ü', 'true']
    with pytest.raises(LayoutConfigError, match="key '1' appears twice"):
        validate_configs({1: [entry()], '1': [entry()]})


@pytest.mark.parametrize('raw, reason', [
    (None, 'entry 0: missing required field: devices'),
    ('all', 'entry 0: must be a mapping'),
    ({'mig-enabled': False}, 'missing required field: devices'),
    ({'devices': 'all'}, 'missing required field: mig-enabled'),
    (dict(entry(), **{'mig-device': {}}), 'unknown key(s) mig-device'),
    (dict(entry(), **{'Devices': 'all'}), 'unknown key(s) Devices'),
])
def test_entry_shape(raw, reason):
    with pytest.raises(LayoutConfigError) as exc:
        validate_configs({'a': [raw]})
    assert 'layout a' in str(exc.value) and reason in str(exc.value)


@pytest.mark.parametrize('value, normalised', [
    ('0x233010DE', ['0x233010DE']),
    (['0x233010DE', '0x20B210DE'], ['0x233010DE', '0x20B210DE']),
    ('0x233010DE:0x16C110DE', ['0x233010DE:0x16C110DE']),      # with the subsystem id
    (str(0x233010DE), [str(0x233010DE)]),                        # decimal
    ('A100-SXM4-40GB', ['A100-SXM4-40GB']),                      # not an id: loads, matches no GPU
    ('', []),                                                    # empty: every GPU
    ([], []),
    (None, []),
    ([''], ['']),                                                # a list holding "": no GPU
])
def test_device_filter_forms_mig_parted_loads(value, normalised):
    assert validate_configs({'a': [entry(device_filter=value)]})['a'][0]['device-filter'] == normalised


def test_unquoted_device_filter_is_refused_with_the_fix():
    """YAML reads 0x233010DE unquoted as an integer; mig-parted then refuses the file."""
    document = yaml.safe_load('version: v1\nmig-configs:\n  a:\n    - device-filter: 0x233010DE\n'
                              '      devices: all\n      mig-enabled: false\n')
    with pytest.raises(LayoutConfigError) as exc:
        validate_document(document)
    assert 'device-filter must be a string' in str(exc.value) and 'quote each id, e.g. "0x233010DE"' in str(exc.value)
    with pytest.raises(LayoutConfigError, match='device-filter must be a string'):
        validate_configs({'a': [entry(device_filter=['0x20B210DE', 0x233010DE])]})
    with pytest.raises(LayoutConfigError, match='device-filter must be a string'):
        validate_configs({'a': [entry(device_filter={'id': '0x20B210DE'})]})


@pytest.mark.parametrize('value, normalised', [
    ('all', 'all'),
    ([0, 1, 2, 3], [0, 1, 2, 3]),
    ([], []),                       # loads; matches no GPU
    ([-1], [-1]),                   # loads; matches no GPU
    ([1.0], [1]),                   # a whole float goes through sigs.k8s.io/yaml's JSON as 1
])
def test_devices_forms_mig_parted_loads(value, normalised):
    assert validate_configs({'a': [entry(devices=value)]})['a'][0]['devices'] == normalised


@pytest.mark.parametrize('value, reason', [
    ('bogus', "invalid string input for 'devices': 'bogus'"),
    ('ALL', "invalid string input for 'devices'"),
    (None, "invalid string input for 'devices'"),
    ({}, 'devices must be "all" or a list'),
    (0, 'devices must be "all" or a list'),
    (['0'], 'devices must be "all" or a list'),
    ([1.5], 'devices must be "all" or a list'),
    ([True], 'devices must be "all" or a list'),
])
def test_devices_forms_mig_parted_refuses(value, reason):
    with pytest.raises(LayoutConfigError) as exc:
        validate_configs({'a': [entry(devices=value)]})
    assert reason in str(exc.value)


def test_mig_enabled_forms():
    assert validate_configs({'a': [entry(mig_enabled=None, mig_devices=None)]})['a'][0]['mig-enabled'] is False
    for value in ('true', 1, 'yes'):
        with pytest.raises(LayoutConfigError, match='mig-enabled must be true or false'):
            validate_configs({'a': [entry(mig_enabled=value)]})


@pytest.mark.parametrize('fields, normalised', [
    ({'mig_enabled': True, 'mig_devices': {}}, {}),                                  # MIG on, no instances
    ({'mig_enabled': False, 'mig_devices': {}}, {}),
    ({'mig_enabled': False}, {}),
    ({'mig_devices': {'1g.10gb': 2, '3g.40gb': 0}}, {'1g.10gb': 2}),                 # zero counts dropped
    ({'mig_devices': {'1g.10gb': 2, '3g.40gb': None}}, {'1g.10gb': 2}),              # null reads as 0
    ({'mig_devices': {'1g.10gb': 2.0}}, {'1g.10gb': 2}),
    ({'mig_devices': {'0g.0gb': 1}}, {'0g.0gb': 1}),                                  # format only (go-nvlib)
    ({'mig_devices': {'1g.5gb+me,you': 1}}, {'1g.5gb+me,you': 1}),
    ({'mig_devices': {'1g.24gb+me.all': 1, '1g.24gb-me': 2, '2g.48gb+gfx': 1}},
     {'1g.24gb+me.all': 1, '1g.24gb-me': 2, '2g.48gb+gfx': 1}),
    ({'mig_devices': {'1g': 'max', '1c.3g': 2, '1g.2mem': 1}}, {'1g': 'max', '1c.3g': 2, '1g.2mem': 1}),  # gpufleet
    ({'mig_devices': {'1g.10gb': 'max'}}, {'1g.10gb': 'max'}),
])
def test_mig_devices_forms_loaded(fields, normalised):
    assert validate_configs({'a': [entry(**fields)]})['a'][0]['mig-devices'] == normalised


@pytest.mark.parametrize('fields, reason', [
    ({'mig_devices': None}, "missing required field 'mig-devices' when 'mig-enabled' is true"),
    ({'mig_devices': ABSENT}, "missing required field 'mig-devices' when 'mig-enabled' is true"),
    ({'mig_enabled': False, 'mig_devices': {'1g.10gb': 1}}, "MIG devices included when 'mig-enabled' is false"),
    ({'mig_devices': {'1g.10gb': 0}}, 'all counts for all MigProfiles are 0'),
    ({'mig_devices': {'1g.10gb': 0, '3g.40gb': None}}, 'all counts for all MigProfiles are 0'),
    ({'mig_devices': {'1g.10gb': -1}}, "invalid count for '1g.10gb': -1"),
    ({'mig_devices': {'1g.10gb': 1.5}}, 'must be a whole number or max'),
    ({'mig_devices': {'1g.10gb': '2'}}, 'must be a whole number or max'),
    ({'mig_devices': {'1g.10gb': True}}, 'must be a whole number or max'),
    ({'mig_devices': {'bogus': 1}}, "invalid format for 'bogus'"),
    ({'mig_devices': {'1g.10gb ': 1}}, "invalid format for '1g.10gb '"),
    ({'mig_devices': {'1g.2m': 1}}, "invalid format for '1g.2m'"),                   # neither grammar
    ({'mig_devices': {1: 1}}, "invalid format for '1'"),
    ({'mig_devices': ['1g.10gb']}, 'mig-devices must be a mapping'),
    ({'mig_devices': {'1g': 'max', '2g': 'max'}}, 'count max may be given to one key only'),
])
def test_mig_devices_forms_refused(fields, reason):
    raw = dict((k, v) for k, v in entry(**fields).items() if v is not ABSENT)
    with pytest.raises(LayoutConfigError) as exc:
        validate_configs({'a': [raw]})
    assert reason in str(exc.value)


def test_memory_slices_extension():
    loaded = validate_configs({'a': [entry(gpufleet_memory_slices=8), entry(gpufleet_memory_slices=[8, 4, 8])]})
    assert [e['gpufleet-memory-slices'] for e in loaded['a']] == [[8], [4, 8]]
    assert 'gpufleet-memory-slices' not in validate_configs({'a': [entry()]})['a'][0]
    for value in (0, 'eight', [], [8, None], True):
        with pytest.raises(LayoutConfigError, match='gpufleet-memory-slices must be a number of memory slices'):
            validate_configs({'a': [entry(gpufleet_memory_slices=value)]})
    with pytest.raises(LayoutConfigError, match='gpufleet-memory-slices needs mig-enabled: true'):
        validate_configs({'a': [entry(gpufleet_memory_slices=8, mig_enabled=False, mig_devices=None)]})


def test_normalised_configs_load_again_unchanged():
    configs = load_catalog()
    assert validate_configs(copy.deepcopy(configs)) == configs
    odd = validate_configs({'a': [entry(device_filter='', devices=[1.0], mig_devices={'1g.10gb': 1, '2g.20gb': 0}),
                                  entry(mig_enabled=None, mig_devices=None)]})
    assert validate_configs(copy.deepcopy(odd)) == odd


# ---- the layout being applied: strictly ------------------------------------------------------

def test_check_layout_unknown_name_lists_the_defined_ones():
    configs = validate_configs({'day': [entry()], 'night': [entry()]})
    with pytest.raises(LayoutConfigError, match="layout 'noon' is not defined \\(defined: day, night\\)"):
        check_layout(configs, 'noon')
    with pytest.raises(LayoutConfigError, match='defined: none'):
        check_layout(validate_document(None), 'day')
    assert check_layout(configs, 'day') == configs['day']


@pytest.mark.parametrize('key, reason', [
    ('0g.0gb', 'must be at least 1'),
    ('2c.1g.10gb', '2c is larger than its 1g'),
    ('1g.5gb+foo', 'expected [<C>c.]<G>g.<GB>gb'),
    ('1g.5gb+me,gfx', 'expected'),
    ('1g.5gb-gfx', 'expected'),
    ('2c.1g', '2c is larger than its 1g'),
    ('0g', 'must be at least 1'),
])
def test_check_layout_refuses_names_no_gpu_offers(key, reason):
    configs = validate_configs({'x': [entry(mig_devices={'1g.10gb': 1}), entry(mig_devices={key: 1})], 'y': [entry()]})
    with pytest.raises(LayoutConfigError) as exc:
        check_layout(configs, 'x')
    assert 'layout x entry 1: mig-devices key %s' % key in str(exc.value) and reason in str(exc.value)
    assert check_layout(configs, 'y') == configs['y']


def test_layout_problems_report_the_other_layouts_without_failing():
    configs = validate_configs({
        'good': [entry(mig_devices={'1g.10gb': 7})],
        'bad': [entry(mig_devices={'0g.0gb': 1}), entry(mig_devices={'1g.5gb+foo': 1, '3c.2g.10gb': 1})],
    })
    problems = layout_problems(configs, skip='good')
    assert sorted(problems) == ['bad'] and len(problems['bad']) == 3
    assert problems['bad'][0].startswith('layout bad entry 0: mig-devices key 0g.0gb')
    assert layout_problems(configs, skip='bad') == {}
    assert layout_problems(load_catalog()) == {}
    assert check_layout(configs, 'good')[0]['mig-devices'] == {'1g.10gb': 7}


# ---- PCI ids: pkg/types/device.go (strconv.ParseUint(s, 0, 32)) ---------------------------------

@pytest.mark.parametrize('text, parsed', [
    ('0x233010DE', (0x233010DE, None)),
    ('0X233010de', (0x233010DE, None)),
    ('0x233010DE:0x16C110DE', (0x233010DE, 0x16C110DE)),
    (str(0x233010DE), (0x233010DE, None)),
    ('0' + format(0x233010DE, 'o'), (0x233010DE, None)),        # a leading 0 means octal
    ('0o' + format(0x233010DE, 'o'), (0x233010DE, None)),
    ('0b' + format(0x233010DE, 'b'), (0x233010DE, None)),
    ('0x2330_10DE', (0x233010DE, None)),
    ('0x_233010DE', (0x233010DE, None)),
    ('0', (0, None)),
    ('0xFFFFFFFF', (0xFFFFFFFF, None)),
    ('0x1233010DE', None),                                        # beyond 32 bits
    ('0x2330__10DE', None),
    ('0x233010DE_', None),
    ('_0x233010DE', None),
    ('0x', None),
    ('09', None),
    ('', None),
    ('-1', None),
    ('+1', None),
    (' 0x233010DE', None),
    ('A100-SXM4-40GB', None),
    ('0x233010DE:', None),
    ('0x233010DE:0x16C110DE:0x1', None),
])
def test_device_filter_ids_as_mig_parted_parses_them(text, parsed):
    assert parse_device_id(text) == parsed


# ---- matching entries to GPUs: cmd/nvidia-mig-parted/apply/{mode,config}.go ---------------------

def matched_entries(entries, gpus, **options):
    result = match_gpus(validate_configs({'x': entries})['x'], gpus, **options)
    return dict((g['index'], g['entries']) for g in result['gpus']), result


@pytest.mark.parametrize('device_filter, matches', [
    ('0x233010DE', True),
    ('0x233010de', True),
    ('0x233010DE:0x16C110DE', True),
    ('0x233010DE:0x16C010DE', False),                     # another subsystem
    (str(0x233010DE), True),
    ('0x20B210DE', False),
    ('H100-SXM5-80GB', False),
    ('', True),
    ([], True),
    ([''], False),
    (['0x20B210DE', 'junk', '0x233010DE'], True),
])
def test_device_filter_matching(device_filter, matches):
    by_index, result = matched_entries([entry(device_filter=device_filter)], [fake_gpu(0, H100)])
    assert (0 in by_index) is matches
    assert len(result['unmatched']) == (0 if matches else 1)


def test_subsystem_filter_needs_the_gpu_subsystem_id():
    gpu = fake_gpu(0, H100, subsystem=None)
    by_index, result = matched_entries([entry(device_filter='0x233010DE:0x16C110DE')], [gpu])
    assert by_index == {} and 'does not name 0x233010DE' in result['unmatched'][0]['reason']


def test_devices_lists_name_some_gpus():
    gpus = [fake_gpu(i, H100) for i in range(4)]
    by_index, result = matched_entries([entry(devices=[0, 2], mig_devices={'1g.10gb': 7}), entry(devices=[])], gpus)
    assert by_index == {0: [0], 2: [0]}
    assert [(u['index'], u['reason']) for u in result['unmatched']] == [
        (1, 'matched by no entry: the devices of entries 0, 1 do not include index 1'),
        (3, 'matched by no entry: the devices of entries 0, 1 do not include index 3')]


def test_every_matching_entry_applies_in_order_and_the_last_wins():
    """apply/config.go calls SetMigConfig once per matching entry; pkg/mig/config/config.go clears the GPU first."""
    entries = [entry(mig_devices={'1g.10gb': 7}),
               entry(device_filter=H100, mig_devices={'3g.40gb': 2}),
               entry(devices=[1], mig_devices={'7g.80gb': 1})]
    result = match_gpus(validate_configs({'x': entries})['x'], [fake_gpu(0, H100), fake_gpu(1, H100), fake_gpu(2, A100_80)])
    summary = [(g['index'], g['entries'], g['entry'], g['mig_enabled'], g['mig_devices']) for g in result['gpus']]
    assert summary == [(0, [0, 1], 1, True, {'3g.40gb': 2}),
                       (1, [0, 1, 2], 2, True, {'7g.80gb': 1}),
                       (2, [0], 0, True, {'1g.10gb': 7})]
    assert all(g['pending'] is False and g['candidates'] == [] for g in result['gpus'])


@pytest.mark.parametrize('first, second', [(True, False), (False, True)])
def test_entries_disagreeing_on_mig_enabled_fail(first, second):
    """apply/mode.go sets each entry's mode in turn; apply/config.go then fails on the other entry."""
    entries = [entry(mig_enabled=first, mig_devices={} if first else None),
               entry(device_filter=H100, mig_enabled=second, mig_devices={} if second else None)]
    configs = validate_configs({'x': entries})
    with pytest.raises(LayoutConfigError) as exc:
        match_gpus(configs['x'], [fake_gpu(0, A100_80), fake_gpu(1, H100)], layout='x')
    message = str(exc.value)
    assert message.startswith('layout x: GPU 1 (NVIDIA GPU, 0x233010DE:0x16C110DE) is matched by entries 0 (mig-enabled: %s), '
                              '1 (mig-enabled: %s)' % (str(first).lower(), str(second).lower()))
    assert 'give each GPU one mig-enabled value' in message
    # the GPU only the first entry matches is fine
    assert match_gpus(configs['x'], [fake_gpu(0, A100_80)])['gpus'][0]['mig_enabled'] is first


def test_agreeing_disabled_entries_and_disabled_winner():
    entries = [entry(mig_enabled=False, mig_devices=None), entry(device_filter=H100, mig_enabled=False, mig_devices={})]
    result = match_gpus(validate_configs({'x': entries})['x'], [fake_gpu(0, H100)])
    assert result['gpus'][0]['entries'] == [0, 1] and result['gpus'][0]['mig_devices'] == {}
    assert result['gpus'][0]['mig_enabled'] is False


def test_unmatched_gpu_is_left_alone_or_fails_on_request():
    entries = validate_configs({'x': [entry(device_filter=[H100, A100_80], mig_devices={'1g.10gb': 7})]})['x']
    gpus = [fake_gpu(0, H100), fake_gpu(1, A30, subsystem='0x153210DE', name='NVIDIA A30')]
    result = match_gpus(entries, gpus)
    assert [g['index'] for g in result['gpus']] == [0]
    assert result['unmatched'] == [{'index': 1, 'uuid': 'GPU-1', 'name': 'NVIDIA A30', 'pci_device_id': A30,
                                    'reason': 'matched by no entry: the device-filter of entry 0 does not name '
                                              '0x20B710DE (subsystem 0x153210DE)'}]
    with pytest.raises(LayoutConfigError) as exc:
        match_gpus(entries, gpus, unmatched='fail', layout='x')
    assert str(exc.value) == ('layout x: GPU 1 (NVIDIA A30, 0x20B710DE:0x153210DE) is matched by no entry: the device-filter '
                              'of entry 0 does not name 0x20B710DE (subsystem 0x153210DE)')
    with pytest.raises(LayoutConfigError, match="unmatched must be one of ignore, fail, got 'skip'"):
        match_gpus(entries, gpus, unmatched='skip')


def test_gpus_without_mig():
    """apply/mode.go: devices: all and mig-enabled false pass over them; devices: [i] with MIG on fails."""
    l40s = fake_gpu(1, '0x26B510DE', mig_capable=False, name='NVIDIA L40S')
    configs = validate_configs({
        'all': [entry(mig_devices={'1g.10gb': 7})],
        'named-off': [entry(devices=[1], mig_enabled=False, mig_devices=None), entry(devices=[0], mig_devices={})],
        'named-on': [entry(devices=[0, 1], mig_devices={'1g.10gb': 7})],
        'other': [entry(device_filter=H100, mig_devices={})],
    })
    gpus = [fake_gpu(0, H100), l40s]
    for name, reason in (('all', 'not MIG-capable; entry 0 passes over it (devices: all or mig-enabled: false)'),
                         ('named-off', 'not MIG-capable; entry 0 passes over it (devices: all or mig-enabled: false)'),
                         ('other', 'not MIG-capable; no entry matches it')):
        result = match_gpus(configs[name], gpus)
        assert result['skipped'] == [{'index': 1, 'name': 'NVIDIA L40S', 'reason': reason}], name
        assert [g['index'] for g in result['gpus']] == [0] and result['unmatched'] == []
    with pytest.raises(LayoutConfigError) as exc:
        match_gpus(configs['named-on'], gpus, layout='named-on')
    assert str(exc.value) == ('layout named-on: entry 0: GPU 1 (NVIDIA L40S, 0x26B510DE:0x16C110DE): cannot set MIG mode on '
                              'non MIG-capable GPU (the entry names it in devices with mig-enabled: true)')


# ---- gpufleet-memory-slices: the choice after MIG is enabled -----------------------------------

def slices_layout(*extra):
    return validate_configs({'x': [
        entry(gpufleet_memory_slices=8, mig_devices={'3g': 2}),
        entry(gpufleet_memory_slices=4, mig_devices={'2g': 2}),
    ] + list(extra)})['x']


def test_memory_slices_entries_wait_for_the_profiles_then_choose():
    h100_off, a30_off = disabled('H100-SXM5-80GB', 0), disabled('A30', 1)
    assert h100_off.profiles == [] and memory_slices_of(h100_off) is None
    result = match_gpus(slices_layout(), [h100_off, a30_off])
    pending = result['gpus']
    assert [(g['pending'], g['mig_enabled'], g['entry'], g['mig_devices'], g['entries']) for g in pending] == [
        (True, True, None, None, []), (True, True, None, None, [])]
    assert pending[0]['candidates'] == [{'entry': 0, 'memory_slices': [8], 'mig_devices': {'3g': 2}},
                                        {'entry': 1, 'memory_slices': [4], 'mig_devices': {'2g': 2}}]
    with pytest.raises(LayoutConfigError, match='NVML reports only once MIG is enabled'):
        choose_entry(pending[0], h100_off)
    h100, a30 = on_index(model_gpu('H100-SXM5-80GB'), 0), on_index(model_gpu('A30'), 1)
    chosen = [choose_entry(pending[0], h100), choose_entry(pending[1], a30)]
    assert [(c['pending'], c['entries'], c['entry'], c['mig_devices'], c['memory_slices']) for c in chosen] == [
        (False, [0], 0, {'3g': 2}, 8), (False, [1], 1, {'2g': 2}, 4)]
    assert concrete_instances(chosen[0]['mig_devices'], h100) == {'3g.40gb': 2}
    assert concrete_instances(chosen[1]['mig_devices'], a30) == {'2g.12gb': 2}
    # MIG already enabled: decided at once, the same way
    decided = match_gpus(slices_layout(), [h100, a30])['gpus']
    assert [(g['pending'], g['entries'], g['mig_devices']) for g in decided] == [
        (False, [0], {'3g': 2}), (False, [1], {'2g': 2})]
    assert choose_entry(decided[0], h100) == decided[0]


def test_memory_slices_unknown_geometry():
    """A GPU whose memory slices no entry names: matched by none once its profiles are known."""
    a30 = model_gpu('A30')
    profiles = [dict(profile, placements=[{'start': p['start'], 'size': p['size']} for p in profile['placements']])
                for profile in a30.profiles]
    profiles.append({'name': '6g.36gb', 'id': 99, 'compute_slices': 6, 'memory_slices': 6, 'memory_mib': 36000,
                     'max_count': 1, 'placements': [{'start': 0, 'size': 6}], 'compute_profiles': []})
    six = replace(a30, profiles=profiles)
    assert memory_slices_of(six) == 6
    pending = match_gpus(slices_layout(), [replace(six, profiles=[], profiles_known=False)])['gpus'][0]
    chosen = choose_entry(pending, six)
    assert (chosen['entry'], chosen['mig_devices'], chosen['entries']) == (None, None, [])
    assert chosen['unmatched'] == 'matched by no entry: entries 0, 1 apply to GPUs with 4 or 8 memory slices and this one has 6'
    with pytest.raises(LayoutConfigError, match='is matched by no entry: entries 0, 1 apply to GPUs with 4 or 8'):
        choose_entry(pending, six, unmatched='fail', layout='x')
    known = match_gpus(slices_layout(), [six])
    assert known['gpus'] == [] and 'apply to GPUs with 4 or 8 memory slices and this one has 6' in known['unmatched'][0]['reason']


def test_explicit_entry_after_the_shapes_wins_for_its_ids():
    explicit = entry(device_filter=A100_80, mig_devices={'7g.80gb': 1})
    a100_off, h100_off = disabled('A100-SXM4-80GB', 0), disabled('H100-SXM5-80GB', 1)
    result = match_gpus(slices_layout(explicit), [a100_off, h100_off])['gpus']
    assert (result[0]['pending'], result[0]['entry'], result[0]['mig_devices']) == (False, 2, {'7g.80gb': 1})
    assert result[1]['pending'] is True
    a100 = model_gpu('A100-SXM4-80GB')
    assert match_gpus(slices_layout(explicit), [a100])['gpus'][0]['entries'] == [0, 2]
    # before the shapes, the explicit entry loses on 8-slice GPUs (the last matching entry wins)
    first = validate_configs({'x': [explicit] + slices_layout()})['x']
    pending = match_gpus(first, [a100_off])['gpus'][0]
    assert pending['candidates'][0] == {'entry': 0, 'memory_slices': None, 'mig_devices': {'7g.80gb': 1}}
    assert choose_entry(pending, a100)['entry'] == 1


def test_memory_slices_entries_and_mig_off_cannot_be_told_apart_before_mig_is_on():
    entries = validate_configs({'x': [entry(mig_enabled=False, mig_devices=None),
                                      entry(gpufleet_memory_slices=8, mig_devices={'3g': 2})]})['x']
    with pytest.raises(LayoutConfigError) as exc:
        match_gpus(entries, [disabled('A30')])
    assert 'entries 0 (mig-enabled: false), 1 (mig-enabled: true, if it has 8 memory slices)' in str(exc.value)
    assert 'known only once MIG is enabled' in str(exc.value)
    # known geometry: the 8-slice entry does not match an A30
    result = match_gpus(entries, [model_gpu('A30')])
    assert (result['gpus'][0]['mig_enabled'], result['gpus'][0]['entries']) == (False, [0])


def test_memory_slices_entries_never_match_gpus_without_mig():
    entries = validate_configs({'x': [entry(devices=[0], gpufleet_memory_slices=8, mig_devices={'3g': 2})]})['x']
    result = match_gpus(entries, [fake_gpu(0, '0x26B510DE', mig_capable=False, name='NVIDIA L40S')])
    assert result['skipped'] == [{'index': 0, 'name': 'NVIDIA L40S', 'reason': 'not MIG-capable; no entry matches it'}]


# ---- one GPU's instances ------------------------------------------------------------------------

def test_concrete_instances_memory_sized_keys_as_nvml_names_them():
    h100 = model_gpu('H100-SXM5-80GB')
    assert concrete_instances({'1g.10gb': 2, '1c.1g.10gb': 1, '3c.3g.40gb': 1, '1c.3g.40gb': 2, '01g.020gb': 1}, h100) == {
        '1g.10gb': 3, '3g.40gb': 1, '1c.3g.40gb': 2, '1g.20gb': 1}


def test_concrete_instances_shapes():
    h100 = model_gpu('H100-SXM5-80GB')
    assert concrete_instances({'1g': 1, '1g.2mem': 1, '2g': 1, '1c.3g': 2, '1g+me': 1}, h100) == {
        '1g.10gb': 1, '1g.20gb': 1, '2g.20gb': 1, '1c.3g.40gb': 2, '1g.10gb+me': 1}
    a30 = model_gpu('A30')
    assert concrete_instances({'4g': 1, '2c.4g': 1}, a30) == {'4g.24gb': 1, '2c.4g.24gb': 1}
    assert [shape_name(p, h100) for p in h100.profiles] == ['1g', '2g', '3g', '4g', '7g', '1g+me', '1g.2mem']


def rtx_pro_gpu():
    """RTX PRO 6000 Blackwell Server as NVML describes it (4 memory slices, suffixed profiles)."""
    def profile(name, compute, slices, starts, max_count):
        return {'name': name, 'id': 0, 'compute_slices': compute, 'memory_slices': slices, 'memory_mib': 24187 * slices,
                'max_count': max_count, 'placements': [{'start': s, 'size': slices} for s in starts],
                'compute_profiles': [{'name': name, 'id': 0, 'compute_slices': compute, 'max_count': 1,
                                      'placements': [{'start': 0, 'size': compute}]}]}
    profiles = [profile('1g.24gb', 1, 1, range(4), 4), profile('1g.24gb+me', 1, 1, range(4), 1),
                profile('1g.24gb+gfx', 1, 1, range(4), 4), profile('1g.24gb+me.all', 1, 1, range(4), 1),
                profile('1g.24gb-me', 1, 1, range(4), 4), profile('2g.48gb', 2, 2, (0, 2), 2),
                profile('2g.48gb+gfx', 2, 2, (0, 2), 2), profile('2g.48gb+me.all', 2, 2, (0, 2), 1),
                profile('2g.48gb-me', 2, 2, (0, 2), 2), profile('4g.96gb', 4, 4, (0,), 1),
                profile('4g.96gb+gfx', 4, 4, (0,), 1)]
    return fake_gpu(0, '0x2BB510DE', name='NVIDIA RTX PRO 6000 Blackwell Server Edition', profiles=profiles)


def test_concrete_instances_suffixed_shapes():
    rtx = rtx_pro_gpu()
    assert concrete_instances({'1g+gfx': 2, '2g-me': 1}, rtx) == {'1g.24gb+gfx': 2, '2g.48gb-me': 1}
    assert concrete_instances({'1g+me.all': 1, '1g-me': 'max'}, rtx) == {'1g.24gb+me.all': 1, '1g.24gb-me': 3}
    assert concrete_instances({'4g+gfx': 1}, rtx) == {'4g.96gb+gfx': 1}
    assert concrete_instances({'1g.24gb+me.all': 1, '2g.48gb+gfx': 1}, rtx) == {'1g.24gb+me.all': 1, '2g.48gb+gfx': 1}
    assert shape_name(rtx.profiles[3], rtx) == '1g+me.all'


@pytest.mark.parametrize('model, mig_devices, reason', [
    ('A30', {'3g': 1}, "GPU 0 (NVIDIA A30, 0x20B710DE:0x153210DE): 3g matches no profile: the GPU offers "
                       "1g.6gb (1g), 1g.6gb+me (1g+me), 2g.12gb (2g), 2g.12gb+me (2g+me), 4g.24gb (4g)"),
    ('A30', {'1g.10gb': 1}, '1g.10gb is not offered: the GPU offers 1g.6gb (1g)'),
    ('A30', {'1g.2mem': 1}, '1g.2mem matches no profile'),
    ('A30', {'3c.4g': 1}, '3c.4g (3c.4g.24gb) is not a compute instance of 4g.24gb, which offers 1c.4g.24gb, 2c.4g.24gb, 4g.24gb'),
    ('A30', {'1g+gfx': 1}, '1g+gfx matches no profile'),
    ('H100-SXM5-80GB', {'1g.24gb+me.all': 1},
     '1g.24gb+me.all is not offered: the GPU offers 1g.10gb (1g), 1g.10gb+me (1g+me), '
     '1g.20gb (1g.2mem), 2g.20gb (2g), 3g.40gb (3g), 4g.40gb (4g), 7g.80gb (7g)'),
    ('H100-SXM5-80GB', {'0g.0gb': 1}, 'mig-devices key 0g.0gb: invalid MIG profile'),
])
def test_concrete_instances_name_what_the_gpu_offers(model, mig_devices, reason):
    with pytest.raises(LayoutConfigError) as exc:
        concrete_instances(mig_devices, model_gpu(model))
    assert reason in str(exc.value)


def test_concrete_instances_need_the_profiles():
    off = disabled('H100-SXM5-80GB')
    with pytest.raises(LayoutConfigError, match='its MIG profiles are unknown: NVML reports them only while MIG is enabled'):
        concrete_instances({'1g': 7}, off)
    with pytest.raises(LayoutConfigError, match='no entry chosen yet'):
        concrete_instances(None, off)
    assert concrete_instances({}, off) == {}


@pytest.mark.parametrize('model, mig_devices, instances, filled', [
    ('H100-SXM5-80GB', {'1g': 'max'}, {'1g.10gb': 7}, '1g.10gb'),
    ('H100-SXM5-80GB', {'3g': 1, '1g': 'max'}, {'3g.40gb': 1, '1g.10gb': 4}, '1g.10gb'),
    ('H100-SXM5-80GB', {'4g': 1, '3g': 'max'}, {'4g.40gb': 1, '3g.40gb': 1}, '3g.40gb'),
    ('H100-SXM5-80GB', {'1g.2mem': 'max'}, {'1g.20gb': 4}, '1g.20gb'),
    ('H100-SXM5-80GB', {'1c.7g': 'max'}, {'1c.7g.80gb': 7}, '1c.7g.80gb'),
    ('H100-SXM5-80GB', {'7g': 1, '1g': 'max'}, {'7g.80gb': 1}, '1g.10gb'),        # nothing more fits
    ('H100-SXM5-80GB', {'1g+me': 'max', '1g': 1}, {'1g.10gb+me': 1, '1g.10gb': 1}, '1g.10gb+me'),
    ('A30', {'1g': 'max'}, {'1g.6gb': 4}, '1g.6gb'),
    ('A30', {'2g': 1, '1g': 'max'}, {'2g.12gb': 1, '1g.6gb': 2}, '1g.6gb'),
])
def test_count_max_is_as_many_as_fit(model, mig_devices, instances, filled):
    gpu = model_gpu(model)
    catalog = Catalog.from_data(gpu.profiles)
    assert concrete_instances(mig_devices, gpu) == instances
    expand_layout(catalog, instances)                   # the planner takes it
    one_more = dict(instances)
    one_more[filled] = one_more.get(filled, 0) + 1
    with pytest.raises(PlanningError):
        expand_layout(catalog, one_more)


# ---- the shipped catalog --------------------------------------------------------------------------

def test_catalog_is_clean_yaml_with_the_five_layouts():
    with open(CATALOG) as handle:
        text = handle.read()
    assert text.startswith('---\n') and '\t' not in text
    configs = load_catalog()
    assert sorted(configs) == ['all-balanced', 'all-disabled', 'all-enabled', 'daytime', 'nighttime']
    assert configs['daytime'] == [{'devices': 'all', 'device-filter': [], 'mig-enabled': True, 'mig-devices': {'1g': 'max'}}]
    for name in configs:
        check_layout(configs, name)


def test_catalog_on_a_mixed_host_with_mig_disabled():
    """Before MIG is on: the mode is known for every GPU, the instances of some wait for the profiles."""
    l40s = fake_gpu(2, '0x26B510DE', mig_capable=False, name='NVIDIA L40S')
    host = [disabled('H100-SXM5-80GB', 0), disabled('A30', 1), on_index(l40s, 2)]
    configs = load_catalog()
    daytime = match_gpus(check_layout(configs, 'daytime'), host)
    assert [(g['index'], g['pending'], g['mig_devices']) for g in daytime['gpus']] == [
        (0, False, {'1g': 'max'}), (1, False, {'1g': 'max'})]
    assert [s['index'] for s in daytime['skipped']] == [2]
    night = match_gpus(check_layout(configs, 'nighttime'), host)
    assert [(g['index'], g['pending'], g['mig_enabled']) for g in night['gpus']] == [(0, True, True), (1, True, True)]
    off = match_gpus(check_layout(configs, 'all-disabled'), host)
    assert [(g['index'], g['mig_enabled'], g['mig_devices']) for g in off['gpus']] == [(0, False, {}), (1, False, {})]


def test_the_examples_of_the_documentation():
    with open(os.path.join(os.path.dirname(CATALOG), '..', '..', '..', 'docs', 'mig_layout.md')) as handle:
        blocks = re.findall(r'```yaml\n(.*?)```', handle.read(), re.S)
    assert len(blocks) == 2
    plain, extended = [validate_document(yaml.safe_load(block)) for block in blocks]
    h100 = model_gpu('H100-SXM5-80GB')
    custom = match_gpus(check_layout(plain, 'custom'), [on_index(h100, index) for index in range(6)])
    assert [u['index'] for u in custom['unmatched']] == [] and len(custom['gpus']) == 6
    custom = custom['gpus']
    assert [(g['index'], g['mig_enabled'], g['mig_devices']) for g in custom[:5]] == [
        (0, False, {}), (1, False, {}), (2, False, {}), (3, False, {}), (4, True, {'1g.10gb': 4, '1c.3g.40gb': 3})]
    assert concrete_instances(custom[4]['mig_devices'], h100) == {'1g.10gb': 4, '1c.3g.40gb': 3}
    assert layout_problems(extended) == {}
    for model, instances in (('H100-SXM5-80GB', {'3g.40gb': 1, '1g.10gb': 4}), ('A30', {'2g.12gb': 1, '1g.6gb': 2}),
                             ('A100-SXM4-80GB', {'7g.80gb': 1})):
        gpu = model_gpu(model)
        match = match_gpus(check_layout(extended, 'mixed'), [gpu])['gpus'][0]
        assert concrete_instances(match['mig_devices'], gpu) == instances, model
    assert concrete_instances(match_gpus(extended['inference'], [model_gpu('A30')])['gpus'][0]['mig_devices'],
                              model_gpu('A30')) == {'1g.6gb': 4}

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Oracle: configs shaped like NVIDIA's (mig-parted's defaults, the GPU operator's ConfigMap, DeepOps' and
mig-parted's site examples) and the shipped catalog, on a GPU of every simulated model.

The expectations are written here by hand from NVIDIA's published profile tables and mig-parted's rules
(the last matching entry wins, unmatched GPUs are left alone, GPUs without MIG are passed over, a
profile the GPU does not offer fails): none is computed by the code under test.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os
from dataclasses import replace

import pytest
import yaml

from gpufleet_nvml_sim.models import MODELS

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import LayoutConfigError, check_layout, layout_problems, validate_document
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import choose_entry, match_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import expand_layout

from .catalogs import SHIPPED_CATALOG, model_gpu, read_simulated_host

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, 'fixtures')
CATALOG = SHIPPED_CATALOG


# ---- NVIDIA's profiles per model: {shape: (profile name, max count)} ----------------------------

def eight_slices(one, double, two, three, seven):
    """The seven profiles of every 8-memory-slice GPU (A100 to GB300), by their names."""
    return {'1g': (one, 7), '1g+me': (one + '+me', 1), '1g.2mem': (double, 4), '2g': (two, 3),
            '3g': (three, 2), '4g': ('4' + three[1:], 1), '7g': (seven, 1)}


FAMILIES = {
    'A100-40GB': eight_slices('1g.5gb', '1g.10gb', '2g.10gb', '3g.20gb', '7g.40gb'),
    '80GB': eight_slices('1g.10gb', '1g.20gb', '2g.20gb', '3g.40gb', '7g.80gb'),
    'H100-NVL': eight_slices('1g.12gb', '1g.24gb', '2g.24gb', '3g.47gb', '7g.94gb'),
    '96GB': eight_slices('1g.12gb', '1g.24gb', '2g.24gb', '3g.48gb', '7g.96gb'),
    'H200': eight_slices('1g.18gb', '1g.35gb', '2g.35gb', '3g.71gb', '7g.141gb'),
    'GH200-144GB': eight_slices('1g.18gb', '1g.36gb', '2g.36gb', '3g.72gb', '7g.144gb'),
    'B200': eight_slices('1g.23gb', '1g.45gb', '2g.45gb', '3g.90gb', '7g.180gb'),
    'GB200': eight_slices('1g.23gb', '1g.47gb', '2g.47gb', '3g.93gb', '7g.186gb'),
    'B300': eight_slices('1g.34gb', '1g.67gb', '2g.67gb', '3g.135gb', '7g.269gb'),
    'GB300': eight_slices('1g.35gb', '1g.70gb', '2g.70gb', '3g.139gb', '7g.278gb'),
    'A30': {'1g': ('1g.6gb', 4), '1g+me': ('1g.6gb+me', 1), '2g': ('2g.12gb', 2), '2g+me': ('2g.12gb+me', 1),
            '4g': ('4g.24gb', 1)},
    'RTX-PRO-6000': {'1g': ('1g.24gb', 4), '1g+me': ('1g.24gb+me', 1), '1g+gfx': ('1g.24gb+gfx', 4),
                     '1g+me.all': ('1g.24gb+me.all', 1), '1g-me': ('1g.24gb-me', 4), '2g': ('2g.48gb', 2),
                     '2g+gfx': ('2g.48gb+gfx', 2), '2g+me.all': ('2g.48gb+me.all', 1), '2g-me': ('2g.48gb-me', 2),
                     '4g': ('4g.96gb', 1), '4g+gfx': ('4g.96gb+gfx', 1)},
    'RTX-PRO-5000': {'1g': ('1g.24gb', 2), '2g': ('2g.48gb', 1)},
}
MEMORY_SLICES = dict((family, {'A30': 4, 'RTX-PRO-6000': 4, 'RTX-PRO-5000': 2}.get(family, 8)) for family in FAMILIES)

# PCI device ids (mig-parted's device-filter form) of every MIG-capable board, by profile family
PCI_FAMILY = {
    '0x20B010DE': 'A100-40GB', '0x20B110DE': 'A100-40GB', '0x20F110DE': 'A100-40GB', '0x20F610DE': 'A100-40GB',
    '0x20B210DE': '80GB', '0x20B510DE': '80GB', '0x20F310DE': '80GB', '0x20F510DE': '80GB',
    '0x233010DE': '80GB', '0x233110DE': '80GB', '0x232210DE': '80GB', '0x232410DE': '80GB',
    '0x232110DE': 'H100-NVL', '0x233A10DE': 'H100-NVL', '0x233910DE': 'H100-NVL',
    '0x234210DE': '96GB', '0x232910DE': '96GB', '0x233D10DE': '96GB', '0x20B610DE': '96GB',
    '0x233510DE': 'H200', '0x233B10DE': 'H200',
    '0x234810DE': 'GH200-144GB',
    '0x290110DE': 'B200', '0x294110DE': 'GB200', '0x318210DE': 'B300', '0x31C210DE': 'GB300', '0x31C310DE': 'GB300',
    '0x20B710DE': 'A30', '0x2BB510DE': 'RTX-PRO-6000', '0x2BB110DE': 'RTX-PRO-6000', '0x2BB410DE': 'RTX-PRO-6000',
    '0x2BB310DE': 'RTX-PRO-5000',
}
L40S = '0x26B910DE'


def names(family, *shapes):
    return [FAMILIES[family][shape][0] for shape in shapes]


def simulated_boards():
    """(model, PCI id) of every MIG-capable simulated model, one per PCI id it can report."""
    return [(key, '0x%08X' % pci_id) for key in sorted(MODELS) if MODELS[key]['mig_capable']
            for pci_id in MODELS[key].get('pci_device_ids', (MODELS[key]['pci_device_id'],))]


BOARDS = simulated_boards()


_BOARD_GPUS = {}


def simulated_gpu(model, **changes):
    """A GPU of ``model`` with MIG disabled as the backend reads it (_host_model.Gpu), with ``changes``."""
    return replace(read_simulated_host([{'model': model}]).gpus[0], **changes)


def board_gpu(model, pci_id, index=0, enabled=True):
    """A GPU of ``model`` reporting ``pci_id`` (MIG enabled: profiles known; disabled: none).

    Shared between tests (the code under test must not change its input: see the test below).
    """
    key = (model, pci_id, index, enabled)
    if key not in _BOARD_GPUS:
        changes = {'pci_device_id': pci_id, 'index': index, 'uuid': 'GPU-%s-%d' % (pci_id, index)}
        _BOARD_GPUS[key] = replace(model_gpu(model), **changes) if enabled else simulated_gpu(model, **changes)
    return _BOARD_GPUS[key]


def test_matching_and_resolving_leave_the_gpu_data_unchanged():
    gpus = [board_gpu('H100-SXM5-80GB', '0x233010DE', 0), board_gpu('A30', '0x20B710DE', 1, enabled=False)]
    before = copy.deepcopy(gpus)
    entries = validate_document({'version': 'v1', 'mig-configs': {'x': [
        {'devices': 'all', 'gpufleet-memory-slices': [4, 8], 'mig-enabled': True, 'mig-devices': {'1g': 'max', '3g': 1}}]}})['x']
    result = match_gpus(entries, gpus)
    chosen = choose_entry(result['gpus'][0], gpus[0])
    assert concrete_instances(chosen['mig_devices'], gpus[0]) == {'1g.10gb': 4, '3g.40gb': 1}
    assert result['gpus'][1]['pending'] is True
    assert gpus == before


def load(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        document = yaml.safe_load(handle)
    if document.get('kind') == 'ConfigMap':
        document = yaml.safe_load(document['data']['config.yaml'])
    return validate_document(document)


def outcome(entries, gpus, index=0):
    """What applying ``entries`` does to GPU ``index`` of a host, as a comparable tuple.

    ('on', entries, instances) / ('off', entries) / ('unmatched',) / ('skipped',) / ('not offered', key)
    / ('refused', message) for the whole host.
    """
    try:
        result = match_gpus(entries, gpus)
    except LayoutConfigError as exc:
        return ('refused', str(exc))
    if any(s['index'] == index for s in result['skipped']):
        return ('skipped',)
    if any(u['index'] == index for u in result['unmatched']):
        return ('unmatched',)
    match = [g for g in result['gpus'] if g['index'] == index][0]
    gpu = [g for g in gpus if g.index == index][0]
    match = choose_entry(match, gpu)
    if not match['mig_enabled']:
        return ('off', match['entries'])
    if match['mig_devices'] is None:
        return ('unmatched',)
    try:
        return ('on', match['entries'], concrete_instances(match['mig_devices'], gpu))
    except LayoutConfigError as exc:
        return ('not offered', str(exc))


def assert_fits(gpu, instances):
    """The planner accepts the instances on the empty GPU (counts within NVML's limits, placeable)."""
    expand_layout(Catalog.from_data(gpu.profiles), instances, 'GPU %s' % gpu.pci_device_id)


# ---- the tables above against the simulator ----------------------------------------------------------

def test_every_simulated_mig_board_has_an_expectation():
    missing = sorted(pci for model, pci in BOARDS if pci not in PCI_FAMILY)
    assert not missing, 'add the profile family of these PCI ids to PCI_FAMILY: %s' % missing
    assert len(BOARDS) >= 8


@pytest.mark.parametrize('model, pci_id', BOARDS)
def test_simulated_profiles_are_nvidias(model, pci_id):
    family = FAMILIES[PCI_FAMILY[pci_id]]
    gpu = board_gpu(model, pci_id)
    reported = dict((p['name'], p['max_count']) for p in gpu.profiles)
    assert reported == dict(family.values()), model


# ---- the fixtures load as mig-parted loads them -------------------------------------------------------

def test_fixtures_load_with_no_problem():
    defaults = load('parted-defaults.yaml')
    assert len(defaults) == 72 and 'all-disabled' in defaults and 'all-enabled' in defaults
    suffixed = sorted(name for name in defaults if any(s in name for s in ('.gfx', '.me.all', '-me')))
    assert suffixed == ['each-1g.24gb-me', 'each-1g.24gb.gfx', 'each-1g.24gb.me.all', 'each-2g.48gb-me',
                        'each-2g.48gb.gfx', 'each-2g.48gb.me.all', 'each-4g.96gb.gfx']
    assert len(load('operator-configmap.yaml')) == 7
    assert sorted(load('site-custom.yaml')) == ['split-half', 'station-all-small', 'station-display-on', 'station-mixed',
                                                'station-override']
    assert 'night shift (A100/H100)' in load('lenient-edges.yaml')
    for name in ('parted-defaults.yaml', 'operator-configmap.yaml', 'site-custom.yaml', 'lenient-edges.yaml'):
        assert layout_problems(load(name)) == {}, name


def test_spacing_nvidias_files_use_loads_the_same():
    """Flow lists with inner spaces and blank lines holding spaces (kept out of the fixtures: the linter refuses them)."""
    text = ('version: v1\nmig-configs:\n  spaced:\n    # B200\n    - device-filter: [ "0x290110DE" ]\n      devices: all\n'
            '      mig-enabled: true\n      mig-devices:\n        "1g.23gb": 7\n    \n'
            '    - device-filter: [ "0x31C210DE",  "0x31C310DE" ]\n      devices: [ 0, 1 ]\n      mig-enabled: false\n')
    assert validate_document(yaml.safe_load(text))['spaced'] == [
        {'device-filter': ['0x290110DE'], 'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.23gb': 7}},
        {'device-filter': ['0x31C210DE', '0x31C310DE'], 'devices': [0, 1], 'mig-enabled': False, 'mig-devices': {}}]


# ---- mig-parted's default-like file: every layout on every board ---------------------------------------

DEFAULTS = load('parted-defaults.yaml')
# Boards that NVIDIA's balanced filters do not list (mig-parted leaves them unmatched too).
NOT_IN_NVIDIAS_BALANCED = ('0x233910DE', '0x2BB110DE', '0x2BB410DE', '0x2BB310DE')
BALANCED_ENTRY = {'RTX-PRO-6000': 0, 'GB300': 1, 'B300': 2, 'GB200': 3, 'B200': 4, 'GH200-144GB': 5, 'H200': 6,
                  'H100-NVL': 7, '96GB': 8, '80GB': 9, 'A100-40GB': 10, 'A30': 11}


def expected_in_defaults(layout, pci_id):
    family = PCI_FAMILY[pci_id]
    offered = dict(FAMILIES[family].values())
    if layout == 'all-disabled':
        return ('off', [0])
    if layout == 'all-enabled':
        return ('on', [0], {})
    if layout == 'balanced-by-model':
        if pci_id in NOT_IN_NVIDIAS_BALANCED:
            return ('unmatched',)
        shapes = ('1g', '2g', '3g') if MEMORY_SLICES[family] == 8 else ('1g', '2g')
        one, two, three = (names(family, *shapes) + [None])[:3]
        instances = {one: 2, two: 1}
        if three:
            instances[three] = 1
        return ('on', [BALANCED_ENTRY[family]], instances)
    if layout == 'each-1g.10gb':        # two entries: the 80GB boards' 1-slice 1g, the 40GB boards' 2-slice one
        return {'80GB': ('on', [0], {'1g.10gb': 7}), 'A100-40GB': ('on', [1], {'1g.10gb': 4})}.get(family, ('unmatched',))
    if layout == 'each-1g.35gb':        # GB300's 1-slice 1g, H200's 2-slice one
        return {'GB300': ('on', [0], {'1g.35gb': 7}), 'H200': ('on', [1], {'1g.35gb': 4})}.get(family, ('unmatched',))
    # each-<profile>: one entry for every GPU, the profile in the layout's name
    profile = layout[len('each-'):].replace('.me.all', '+me.all').replace('.me', '+me').replace('.gfx', '+gfx')
    count = list(DEFAULTS[layout][0]['mig-devices'].values())[0]
    if family == 'GB200' and profile in ('1g.24gb', '1g.24gb+me'):     # its early driver's name (DRIVER_RENAMES)
        return ('on', [0], {profile.replace('24', '23'): count})
    if profile in offered and count > offered[profile]:
        return ('too many', profile)        # a 2-slice GPU holds fewer than NVIDIA's 4-slice count
    if profile in offered:
        return ('on', [0], {profile: count})
    return ('not offered', profile)


@pytest.mark.parametrize('layout', sorted(DEFAULTS))
def test_parted_defaults_on_every_board(layout):
    entries = check_layout(DEFAULTS, layout)
    for model, pci_id in BOARDS:
        gpu = board_gpu(model, pci_id)
        expected = expected_in_defaults(layout, pci_id)
        got = outcome(entries, [gpu])
        if expected[0] == 'not offered':
            assert got[0] == 'not offered' and '%s is not offered' % expected[1] in got[1], (model, pci_id, got)
            continue
        if expected[0] == 'too many':
            assert got[0] == 'on' and got[2][expected[1]] > dict(FAMILIES[PCI_FAMILY[pci_id]].values())[expected[1]]
            with pytest.raises(Exception, match='requested but the GPU allows at most'):
                assert_fits(gpu, got[2])
            continue
        assert got == expected, (model, pci_id)
        if got[0] == 'on':
            assert_fits(gpu, got[2])


def test_parted_defaults_pass_over_gpus_without_mig():
    l40s = simulated_gpu('L40S')
    assert l40s.pci_device_id == L40S and not l40s.mig_capable
    for layout in DEFAULTS:
        assert outcome(DEFAULTS[layout], [l40s]) == ('skipped',), layout


# ---- the GPU operator's ConfigMap shape ----------------------------------------------------------------

OPERATOR = load('operator-configmap.yaml')


def expected_in_operator(layout, pci_id):
    family = PCI_FAMILY[pci_id]
    rtx = family == 'RTX-PRO-6000'
    if layout == 'all-disabled':
        return ('off', [0])
    if layout == 'all-enabled':
        return ('on', [0], {})
    if layout == 'inference-gfx':
        return ('on', [0], {'1g.24gb+gfx': 4}) if rtx else ('not offered', '1g.24gb+gfx')
    if layout == 'media-one':
        return ('on', [0], {'1g.24gb+me.all': 1, '1g.24gb-me': 3}) if rtx else ('not offered', '1g.24gb')
    if layout == 'small-and-large':     # only these two PCI ids, then only the SXM4 40GB
        return {'0x233010DE': ('on', [0], {'1g.10gb': 4, '3g.40gb': 1}),
                '0x20B210DE': ('on', [0], {'1g.10gb': 4, '3g.40gb': 1}),
                '0x20B010DE': ('on', [1], {'1g.5gb': 4, '3g.20gb': 1})}.get(pci_id, ('unmatched',))
    if layout == 'shared-3g':
        return ('on', [0], {'1c.3g.40gb': 3, '3g.40gb': 1}) if pci_id == '0x233010DE' else ('unmatched',)
    if layout == 'all-balanced':
        if pci_id in NOT_IN_NVIDIAS_BALANCED:
            return ('unmatched',)
        return {'RTX-PRO-6000': ('on', [0], {'1g.24gb': 2, '2g.48gb': 1}),
                'B200': ('on', [1], {'1g.23gb': 2, '2g.45gb': 1, '3g.90gb': 1}),
                'A30': ('on', [2], {'1g.6gb': 2, '2g.12gb': 1})}.get(family, ('unmatched',))
    raise AssertionError('no expectation for %s' % layout)


@pytest.mark.parametrize('layout', sorted(OPERATOR))
def test_operator_configmap_on_every_board(layout):
    entries = check_layout(OPERATOR, layout)
    for model, pci_id in BOARDS:
        gpu = board_gpu(model, pci_id)
        expected = expected_in_operator(layout, pci_id)
        got = outcome(entries, [gpu])
        if expected[0] == 'not offered':
            assert got[0] == 'not offered' and expected[1] in got[1], (model, pci_id, got)
            continue
        assert got == expected, (model, pci_id)
        if got[0] == 'on':
            assert_fits(gpu, got[2])


# ---- site layouts: GPUs named by index, a display GPU without MIG -------------------------------------

SITE = load('site-custom.yaml')


def test_split_half_on_an_eight_gpu_server():
    gpus = [board_gpu('A100-SXM4-40GB', '0x20B010DE', index) for index in range(8)]
    expected = [('off', [0])] * 4 + [
        ('on', [1], {'1g.5gb': 7}), ('on', [2], {'2g.10gb': 3}), ('on', [3], {'3g.20gb': 2}),
        ('on', [4], {'1g.5gb': 1, '1c.3g.20gb': 3, '2g.10gb': 1})]
    got = [outcome(SITE['split-half'], gpus, index) for index in range(8)]
    assert got == expected
    for gpu, result in zip(gpus, got):
        if result[0] == 'on':
            assert_fits(gpu, result[2])
    # a host with fewer GPUs: the entries naming absent indices match nothing
    assert [outcome(SITE['split-half'], gpus[:2], i) for i in range(2)] == [('off', [0]), ('off', [0])]


def station():
    """Four A100 80GB at indices 0, 1, 2, 4 and an L40S (display) at index 3."""
    gpus = [board_gpu('A100-SXM4-80GB', '0x20B210DE', index) for index in (0, 1, 2, 4)]
    display = simulated_gpu('L40S', index=3, uuid='GPU-display')
    return sorted(gpus + [display], key=lambda g: g.index)


@pytest.mark.parametrize('layout, expected', [
    ('station-all-small', {0: ('on', [0], {'1g.10gb': 7}), 1: ('on', [0], {'1g.10gb': 7}), 2: ('on', [0], {'1g.10gb': 7}),
                           3: ('skipped',), 4: ('on', [0], {'1g.10gb': 7})}),
    ('station-mixed', {0: ('off', [0]), 1: ('on', [1], {'3g.40gb': 2}), 2: ('on', [2], {'2g.20gb': 3, '1g.10gb': 1}),
                       3: ('skipped',), 4: ('on', [3], {'1g.10gb': 7})}),
    ('station-override', {0: ('on', [0], {'1g.10gb': 7}), 1: ('on', [0, 1], {'7g.80gb': 1}),
                          2: ('on', [0, 1, 2], {'3g.40gb': 2}), 3: ('skipped',), 4: ('on', [0], {'1g.10gb': 7})}),
])
def test_station_layouts(layout, expected):
    gpus = station()
    got = dict((index, outcome(SITE[layout], gpus, index)) for index in expected)
    assert got == expected
    skipped = match_gpus(SITE[layout], gpus)['skipped']
    assert [s['index'] for s in skipped] == [3]


def test_station_mig_on_the_display_gpu_is_refused_with_mig_parteds_reason():
    got = outcome(SITE['station-display-on'], station(), 4)
    assert got[0] == 'refused'
    assert got[1] == ('entry 0: GPU 3 (NVIDIA L40S, 0x26B910DE:0x185110DE): cannot set MIG mode on non MIG-capable GPU '
                      '(the entry names it in devices with mig-enabled: true)')


# ---- what mig-parted accepts that looks odd ------------------------------------------------------------

EDGES = load('lenient-edges.yaml')


def test_edges_by_subsystem_and_id_notations():
    entries = EDGES['by-subsystem']
    h100 = board_gpu('H100-SXM5-80GB', '0x233010DE')
    assert outcome(entries, [replace(h100, pci_subsystem_id='0x16C110DE')]) == ('on', [0], {'7g.80gb': 1})
    assert outcome(entries, [replace(h100, pci_subsystem_id='0x16C010DE')]) == ('unmatched',)
    assert outcome(entries, [board_gpu('A100-SXM4-80GB', '0x20B210DE')]) == ('on', [1], {'7g.80gb': 1})     # decimal
    assert outcome(entries, [board_gpu('GH200-96GB', '0x234210DE')]) == ('on', [2], {'7g.96gb': 1})         # 0x..._..
    assert outcome(entries, [board_gpu('A30', '0x20B710DE')]) == ('on', [3], {'1g.6gb': 4})                 # octal
    assert outcome(entries, [board_gpu('B200', '0x290110DE')]) == ('unmatched',)


def test_edges_filters_that_match_nothing_or_everything():
    for model, pci_id in BOARDS:
        gpu = board_gpu(model, pci_id)
        assert outcome(EDGES['by-name'], [gpu]) == ('unmatched',), model
        assert outcome(EDGES['night shift (A100/H100)'], [gpu]) == ('off', [0])
        assert outcome(EDGES['null-mode'], [gpu]) == ('off', [0])
        got = outcome(EDGES['empty-filter'], [gpu])
        if '1g.10gb' in dict(FAMILIES[PCI_FAMILY[pci_id]].values()):
            assert got == ('on', [0], {'1g.10gb': 2}), model
        else:
            assert got[0] == 'not offered', model


# ---- the shipped catalog, once for every model ---------------------------------------------------------

def catalog():
    with open(CATALOG) as handle:
        return validate_document(yaml.safe_load(handle))


def expected_in_catalog(layout, profiles, memory_slices):
    """The catalog's promise, by geometry: 8 memory slices (7 compute), 4 or 2. ``profiles``: {shape: name}."""
    eight = memory_slices == 8
    if layout == 'all-disabled':
        return ('off', [0])
    if layout == 'all-enabled':
        return ('on', [0], {})
    if layout == 'daytime':
        return ('on', [0], {profiles['1g']: {8: 7, 4: 4, 2: 2}[memory_slices]})
    if memory_slices == 2:      # the halves are 1g: both layouts are two of them
        return ('on', [2], {profiles['1g']: 2})
    if layout == 'nighttime':
        return ('on', [0], {profiles['3g']: 2}) if eight else ('on', [1], {profiles['2g']: 2})
    if layout == 'all-balanced':
        if eight:
            return ('on', [0], {profiles['1g']: 2, profiles['2g']: 1, profiles['3g']: 1})
        return ('on', [1], {profiles['1g']: 2, profiles['2g']: 1})
    raise AssertionError(layout)


@pytest.mark.parametrize('layout', ['all-disabled', 'all-enabled', 'all-balanced', 'daytime', 'nighttime'])
def test_catalog_on_every_board(layout):
    entries = check_layout(catalog(), layout)
    for model, pci_id in BOARDS:
        family = PCI_FAMILY[pci_id]
        profiles = dict((shape, name) for shape, (name, count) in FAMILIES[family].items())
        expected = expected_in_catalog(layout, profiles, MEMORY_SLICES[family])
        enabled = board_gpu(model, pci_id)
        assert outcome(entries, [enabled]) == expected, (model, pci_id)
        # MIG still off: the mode is known now, the entry once MIG is on
        before = match_gpus(entries, [board_gpu(model, pci_id, enabled=False)])['gpus'][0]
        assert before['mig_enabled'] is (layout != 'all-disabled')
        chosen = choose_entry(before, enabled)
        assert chosen['entries'] == expected[1], (model, pci_id)
        if expected[0] == 'on':
            assert concrete_instances(chosen['mig_devices'], enabled) == expected[2]
            assert_fits(enabled, expected[2])


def future_gpu(pci_id, rename):
    """A GPU nobody has tables for yet: the geometry of a known one, new names and a new PCI id."""
    known = model_gpu('A100-SXM4-80GB' if len(rename) == 7 else 'A30')
    profiles = []
    for profile in known.profiles:
        old = profile['name']
        compute_profiles = [dict(ci, name=ci['name'].replace(old.split('+')[0], rename[old].split('+')[0]))
                            for ci in profile['compute_profiles']]
        profiles.append(dict(profile, name=rename[old], compute_profiles=compute_profiles))
    return replace(known, profiles=profiles, pci_device_id=pci_id, name='NVIDIA Future GPU')


FUTURE_8 = {'1g.10gb': '1g.50gb', '1g.10gb+me': '1g.50gb+me', '1g.20gb': '1g.100gb', '2g.20gb': '2g.100gb',
            '3g.40gb': '3g.200gb', '4g.40gb': '4g.200gb', '7g.80gb': '7g.400gb'}
FUTURE_4 = {'1g.6gb': '1g.32gb', '1g.6gb+me': '1g.32gb+me', '2g.12gb': '2g.64gb', '2g.12gb+me': '2g.64gb+me',
            '4g.24gb': '4g.128gb'}


@pytest.mark.parametrize('rename, profiles, memory_slices', [
    (FUTURE_8, {'1g': '1g.50gb', '2g': '2g.100gb', '3g': '3g.200gb'}, 8),
    (FUTURE_4, {'1g': '1g.32gb', '2g': '2g.64gb'}, 4),
])
@pytest.mark.parametrize('layout', ['all-balanced', 'daytime', 'nighttime'])
def test_catalog_on_a_gpu_released_tomorrow(rename, profiles, memory_slices, layout):
    gpu = future_gpu('0x3FFF10DE', rename)
    expected = expected_in_catalog(layout, profiles, memory_slices)
    assert outcome(check_layout(catalog(), layout), [gpu]) == expected
    assert_fits(gpu, expected[2])


def test_catalog_explicit_entry_wins_for_its_ids():
    """Appending a memory-sized mig-parted entry gives one model its own nighttime."""
    configs = catalog()
    entries = check_layout(configs, 'nighttime') + validate_document({'version': 'v1', 'mig-configs': {'x': [
        {'device-filter': ['0x20B210DE'], 'devices': 'all', 'mig-enabled': True, 'mig-devices': {'7g.80gb': 1}}]}})['x']
    assert outcome(entries, [board_gpu('A100-SXM4-80GB', '0x20B210DE')]) == ('on', [0, 3], {'7g.80gb': 1})
    assert outcome(entries, [board_gpu('H100-SXM5-80GB', '0x233010DE')]) == ('on', [0], {'3g.40gb': 2})
    before = match_gpus(entries, [board_gpu('A100-SXM4-80GB', '0x20B210DE', enabled=False)])['gpus'][0]
    assert (before['pending'], before['entry'], before['mig_devices']) == (False, 3, {'7g.80gb': 1})


def test_catalog_on_a_mixed_host():
    gpus = [board_gpu('H100-SXM5-80GB', '0x233010DE', 0), board_gpu('A30', '0x20B710DE', 1)]
    l40s = simulated_gpu('L40S', index=2)
    result = match_gpus(check_layout(catalog(), 'nighttime'), gpus + [l40s])
    assert [(g['index'], g['entries'], g['mig_devices']) for g in result['gpus']] == [(0, [0], {'3g': 2}), (1, [1], {'2g': 2})]
    assert result['skipped'] == [{'index': 2, 'name': 'NVIDIA L40S', 'reason': 'not MIG-capable; no entry matches it'}]
    assert [concrete_instances(g['mig_devices'], gpus[g['index']]) for g in result['gpus']] == [{'3g.40gb': 2}, {'2g.12gb': 2}]

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stranded slices and fragmentation (docs/fragmentation.md): an optimally used GPU scores 0, a churned one high.

The figures are defined once in _mig_geometry.analyze and slice_states; the facts, the metrics, the
fleet map and the repack thresholds all read them from there (the last tests pin that).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import random
import re
from dataclasses import replace

import pytest
import yaml

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import NOBODY, Host
from ansible_collections.gpufleet.mig.plugins.module_utils.host import _layout_metrics
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import validate_document
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import choose_entry, match_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import (
    Catalog,
    GpuInstanceProfile,
    Occupancy,
    analyze,
    best_rearrangement,
    slice_states,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import plan_gpu
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts, nvidia_mig_repack

from .catalogs import SHIPPED_CATALOG, MIG_MODELS, model_gpu
from .oracle import all_placements, brute_force_placeable, free_space_figures, with_instances

CATALOG = SHIPPED_CATALOG
EIGHT_SLICE_MODELS = [m for m in MIG_MODELS if m not in ('A30', 'RTX-PRO-6000-SERVER')]


def shipped_layouts():
    with open(CATALOG) as handle:
        return validate_document(yaml.safe_load(handle))


def figures_of(gpu, placed):
    catalog = Catalog.from_data(gpu.profiles)
    return analyze(catalog, Occupancy.of(catalog, placed))


def one_slice_profile(gpu):
    return min((p for p in gpu.profiles if '+' not in p['name'] and '-' not in p['name']),
               key=lambda p: (p['memory_slices'], p['compute_slices']))['name']


@pytest.mark.parametrize('model', MIG_MODELS)
def test_every_shipped_layout_scores_zero_on_every_model(model):
    """daytime (7x1g), nighttime, balanced...: placed as the collection places them, nothing is stranded or fragmented."""
    configs = shipped_layouts()
    checked = []
    for name, entries in sorted(configs.items()):
        gpu = model_gpu(model)
        record = choose_entry(match_gpus(entries, [gpu])['gpus'][0], gpu)
        if not record['mig_enabled'] or record['mig_devices'] is None:
            continue
        plan = plan_gpu(gpu, concrete_instances(record['mig_devices'], gpu))
        placed = [(entry['profile'], entry['placement']['start']) for entry in plan.after]
        figures = figures_of(gpu, placed)
        assert (figures['stranded_slices'], figures['fragmentation']) == (0, 0.0), (name, placed, figures)
        assert (plan.analysis['stranded_slices'], plan.analysis['fragmentation']) == (0, 0.0)
        assert slice_states(Catalog.from_data(gpu.profiles), placed).count('stranded') == 0
        checked.append(name)
    assert {'all-balanced', 'all-enabled', 'daytime', 'nighttime'} <= set(checked)


@pytest.mark.parametrize('model', EIGHT_SLICE_MODELS)
def test_seven_small_instances_strand_nothing(model):
    """The daytime layout: slice 7 is free but every compute slice is taken; no arrangement can use it."""
    gpu = model_gpu(model)
    one = one_slice_profile(gpu)
    placed = [(one, start) for start in range(7)]
    figures = figures_of(gpu, placed)
    assert figures['free_slices'] == 1 and figures['unusable_slices'] == 1
    assert figures['stranded_slices'] == 0 and figures['fragmentation'] == 0.0
    assert figures['largest_placeable'] is None and figures['repacked_largest_placeable'] is None
    assert slice_states(Catalog.from_data(gpu.profiles), placed)[7] == 'unusable'


@pytest.mark.parametrize('model', EIGHT_SLICE_MODELS)
def test_a_churned_gpu_scores_high(model):
    """1g at 0, 3 and 6: slice 7 is wasted and a 4g no longer fits; 1g at 0, 1, 2 would leave both."""
    gpu = model_gpu(model)
    one = one_slice_profile(gpu)
    figures = figures_of(gpu, [(one, 0), (one, 3), (one, 6)])
    assert figures['stranded_slices'] == 1
    assert figures['largest_placeable_slices'] == 2 and figures['repacked_largest_placeable_slices'] == 4
    assert figures['fragmentation'] == 0.5
    assert slice_states(Catalog.from_data(gpu.profiles), [(one, 0), (one, 3), (one, 6)]) == [
        0, 'free', 'free', 1, 'free', 'free', 2, 'stranded']
    repacked = figures_of(gpu, [(one, 0), (one, 1), (one, 2)])
    assert (repacked['stranded_slices'], repacked['fragmentation'], repacked['largest_placeable_slices']) == (0, 0.0, 4)


def test_a_full_largest_with_a_wasted_slice_is_stranded_but_not_fragmented():
    """The driver's first three 1g (at 6, 4, 5): a 4g still fits at 0, but slice 7 is wasted."""
    gpu = model_gpu('A100-SXM4-80GB')
    figures = figures_of(gpu, [('1g.10gb', 6), ('1g.10gb', 4), ('1g.10gb', 5)])
    assert (figures['stranded_slices'], figures['fragmentation'], figures['largest_placeable']) == (1, 0.0, '4g.40gb')


def test_every_slice_usable_yet_fragmented():
    """1g at 0, 1, 5 (kubernetes-sigs/dra-driver-nvidia-gpu issue 933): nothing stranded, half the largest lost."""
    figures = figures_of(model_gpu('A100-SXM4-80GB'), [('1g.10gb', 0), ('1g.10gb', 1), ('1g.10gb', 5)])
    assert (figures['stranded_slices'], figures['largest_placeable_slices'], figures['fragmentation']) == (0, 2, 0.5)
    assert figures['repacked_largest_placeable'] == '4g.40gb'


@pytest.mark.parametrize('model', ['A100-SXM4-80GB', 'H200', 'A30', 'RTX-PRO-6000-SERVER'])
def test_figures_agree_with_an_independent_brute_force(model):
    """Every valid placement set (a sample on 8-slice GPUs), against plain sets; the best of each multiset scores 0."""
    gpu = model_gpu(model)
    catalog = Catalog.from_data(gpu.profiles)
    placements = sorted(all_placements(gpu))
    sample = placements if len(placements) <= 120 else random.Random('geometry').sample(placements, 120)
    saw = set()
    for placed in sample:
        placed = list(placed)
        expected = free_space_figures(gpu, placed)
        figures = analyze(catalog, Occupancy.of(catalog, placed))
        assert dict((key, figures[key]) for key in expected) == expected, placed
        states = slice_states(catalog, placed)
        assert states.count('stranded') == figures['stranded_slices'], placed
        assert states.count('unusable') == figures['unusable_slices'] - figures['stranded_slices'], placed
        assert states.count('free') + states.count('stranded') + states.count('unusable') == figures['free_slices']
        assert 0.0 <= figures['fragmentation'] <= 1.0
        saw.add((figures['stranded_slices'] > 0, figures['fragmentation'] > 0))
    if model in ('A100-SXM4-80GB', 'H200'):
        assert saw == {(False, False), (True, False), (False, True), (True, True)}


def test_the_best_rearrangement_is_searched_over_every_placement():
    gpu = model_gpu('A100-SXM4-80GB')
    catalog = Catalog.from_data(gpu.profiles)
    largest, fewest_unusable = best_rearrangement(catalog, ['1g.10gb', '1g.10gb', '1g.10gb', '2g.20gb'])
    assert (largest.name, fewest_unusable) == ('2g.20gb', 0)   # 3 slices stay free: a 2g at 4 beside 2g at 0, 1g at 2, 3, 6
    largest, fewest_unusable = best_rearrangement(catalog, ['1g.10gb', '1g.10gb', '1g.10gb'])
    assert (largest.name, fewest_unusable) == ('4g.40gb', 0)   # 1g at 4, 5, 6: a 4g at 0
    assert best_rearrangement(catalog, ['1g.10gb'] * 7)[0] is None
    assert best_rearrangement(catalog, ['1g.10gb+me', '1g.10gb+me']) is None   # one +me per GPU: no placement
    assert best_rearrangement(catalog, []) == (catalog.get('7g.80gb'), 0)


def test_the_cache_tells_gpu_geometries_apart():
    """Same profile names, other placements: the best rearrangement of one is not reused for the other."""
    def catalog(starts_2g):
        return Catalog([GpuInstanceProfile('1g.5gb', 1, 1, 1, 1, 7, range(7), {}),
                        GpuInstanceProfile('2g.10gb', 2, 2, 2, 2, 4, starts_2g, {}),
                        GpuInstanceProfile('7g.40gb', 0, 7, 8, 8, 1, [0], {})])
    late, early = catalog([6]), catalog([0])
    assert best_rearrangement(late, ['1g.5gb'] * 6) == (late.get('2g.10gb'), 0)   # 1g at 0-5, a 2g at 6
    assert best_rearrangement(early, ['1g.5gb'] * 6) == (early.get('1g.5gb'), 1)  # a 1g fits, slice 7 never does
    assert best_rearrangement(late, ['1g.5gb'] * 7) == (None, 1)


def test_a_placement_no_arrangement_reproduces_is_judged_as_it_is():
    """Instances NVML would not have placed (two +me): no rearrangement exists, nothing is called stranded."""
    gpu = model_gpu('A100-SXM4-80GB')
    catalog = Catalog.from_data(gpu.profiles)
    occupancy = Occupancy().with_instance(catalog.get('1g.10gb+me'), 0).with_instance(catalog.get('1g.10gb+me'), 3)
    figures = analyze(catalog, occupancy)
    assert figures['stranded_slices'] == 0 and figures['fragmentation'] == 0.0
    assert figures['repacked_largest_placeable'] == figures['largest_placeable'] == '3g.40gb'


# ---- one definition everywhere: facts, metrics, the map, the repack thresholds -----------------------------

CHURNED = [('1g.10gb', 0, []), ('1g.10gb', 3, []), ('1g.10gb', 6, [])]
DAYTIME = [('1g.10gb', start, []) for start in range(7)]


def metric(text, name):
    return float(re.search(r'(?m)^%s\{gpu="0",.*\} (\S+)$' % name, text).group(1))


@pytest.mark.parametrize('instances, stranded, fragmentation', [(CHURNED, 1, 0.5), (DAYTIME, 0, 0.0)])
def test_facts_metrics_and_repack_read_the_same_figures(instances, stranded, fragmentation):
    gpu = with_instances(model_gpu('A100-SXM4-80GB'), instances)
    gpu = replace(gpu, index=0, processes=())
    facts = nvidia_mig_facts.gpu_facts(gpu)
    assert (facts['stranded_slices'], facts['fragmentation']) == (stranded, fragmentation)
    text = _layout_metrics.render(Host(gpus=(gpu,)), 'daytime', {}, None)
    assert metric(text, 'gpufleet_mig_stranded_slices') == stranded
    assert metric(text, 'gpufleet_mig_fragmentation_ratio') == fragmentation
    placeable = dict((m.group(1), float(m.group(2))) for m in re.finditer(
        r'(?m)^gpufleet_mig_placeable_instances\{gpu="0",model="[^"]+",profile="([^"]+)",uuid="[^"]+"\} (\S+)$', text))
    assert placeable == facts['placeable'] and len(placeable) == len(gpu.profiles)
    # the fleet map's reading of the same facts: tests/unit/plugins/filter/test_mig_fleet_map.py (a filter plugin
    # needs the controller's ansible package, which ansible-test's module_utils unit run does not have)
    thresholds = {'fragmentation_above': 0.25, 'stranded_above': 0}
    status = nvidia_mig_repack.plan_repack(gpu, NOBODY, thresholds)[0]
    assert status == ('repacked' if stranded else 'below_threshold')
    assert nvidia_mig_repack.plan_repack(gpu, NOBODY, {'fragmentation_above': fragmentation, 'stranded_above': stranded})[0] == 'below_threshold'


def test_the_placeable_gauge_counts_more_instances_per_profile():
    # 1g at slices 0, 3 and 6 of an A100-80GB: four more 1g fit (1, 2, 4, 5), one 2g (4-5), no 3g, 4g or 7g.
    gpu = with_instances(model_gpu('A100-SXM4-80GB'), CHURNED)
    gpu = replace(gpu, index=0, processes=())
    text = _layout_metrics.render(Host(gpus=(gpu,)), 'daytime', {}, None)
    for profile, count in (('1g.10gb', 4), ('2g.20gb', 1), ('3g.40gb', 0), ('4g.40gb', 0), ('7g.80gb', 0)):
        assert re.search(r'(?m)^gpufleet_mig_placeable_instances\{gpu="0",model="[^"]+",profile="%s",uuid="[^"]+"\} %d$'
                         % (re.escape(profile), count), text), (profile, count)


def _placeable(gpu, placed):
    catalog = Catalog.from_data(gpu.profiles)
    return analyze(catalog, Occupancy.of(catalog, placed))['placeable']


@pytest.mark.parametrize('model', MIG_MODELS)
def test_placeable_is_the_brute_force_count_on_every_model_empty_and_with_a_media_instance(model):
    gpu = model_gpu(model)
    assert _placeable(gpu, []) == brute_force_placeable(gpu)
    with_media = sorted(p['name'] for p in gpu.profiles if p['name'].endswith('+me'))
    for name in with_media:
        start = [p for p in gpu.profiles if p['name'] == name][0]['placements'][0]['start']
        placeable = _placeable(gpu, [(name, start)])
        assert placeable == brute_force_placeable(gpu, [(name, start)])
        assert placeable[name] == 0    # one media-extension instance per GPU


def test_placeable_of_an_empty_a100_80gb_as_nvidia_documents_it():
    # NVIDIA's MIG user guide, A100 80GB supported profiles: the most instances of each profile alone.
    assert _placeable(model_gpu('A100-SXM4-80GB'), []) == {
        '1g.10gb': 7, '1g.10gb+me': 1, '1g.20gb': 4, '2g.20gb': 3, '3g.40gb': 2, '4g.40gb': 1, '7g.80gb': 1}


def test_placeable_honours_the_count_nvml_reports_and_one_media_instance_per_gpu():
    # Shipped catalogs never limit a plain profile below its starts, nor a +me profile above 1: a driver's
    # answer may, and each limit holds on its own.
    limits = {'1g.10gb': 3, '1g.10gb+me': 2}
    shipped = model_gpu('A100-SXM4-80GB')
    gpu = replace(shipped, profiles=[dict(p, max_count=limits.get(p['name'], p['max_count'])) for p in shipped.profiles])
    placeable = _placeable(gpu, [('1g.10gb', 6)])
    assert placeable == brute_force_placeable(gpu, [('1g.10gb', 6)])
    assert (placeable['1g.10gb'], placeable['1g.10gb+me']) == (2, 1)

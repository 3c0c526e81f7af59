# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whole-GPU demand in the layout advisor (planning/_layout_advisor): a single nvidia.com/gpu pod once made it advise
MIG off on every H100 of the fleet; an index goes without MIG only as often as the whole GPUs asked for need."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.planning import _advice_demand as demand_input
from ansible_collections.gpufleet.mig.plugins.module_utils.planning import _layout_advisor as advisor
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu, shipped_catalog

H100 = 'H100-SXM5-80GB'
A100 = 'A100-SXM4-40GB'


@pytest.fixture(scope='module')
def shipped():
    return shipped_catalog()


def demand(by_hour, days=3):
    resources = set(r for wanted in by_hour.values() for r in wanted)
    return demand_input.Demand(days, dict((r, tuple(tuple(by_hour.get(h, {}).get(r, 0.0) for h in range(24)) for dummy in range(days)))
                                          for r in resources))


def mostly_mig(whole_gpus):
    """A100 MIG profiles all day, ``whole_gpus`` nvidia.com/gpu pods 09:00-12:00."""
    return demand(dict((h, {'nvidia.com/mig-1g.5gb': 20.0, 'nvidia.com/mig-3g.20gb': 3.0,
                            'nvidia.com/gpu': float(whole_gpus) if 9 <= h < 12 else 0.0}) for h in range(24)))


def fleets(models):
    return [advisor.ModelFleet(m, model_gpu(m), 2, 4, host_names=tuple('%s-%d' % (m, n) for n in range(2))) for m in models]


def without_mig(model_advice):
    """The most device indices without MIG in any period of the model's advised schedule."""
    return max(sum(1 for slot in layout.slots if slot == advisor.WHOLE_GPU_LAYOUT) for dummy, layout in model_advice.periods)


@pytest.mark.parametrize('models', [[H100], [H100, A100], [A100, H100]])
def test_a_single_whole_gpu_pod_does_not_take_mig_off_every_gpu(shipped, models):
    advice = advisor.advise(mostly_mig(1), fleets(models), shipped, ((0, 'all-balanced'),))
    h100 = [m for m in advice.models if m.model == H100][0]
    # one pod needs one GPU; a layout is per device index on every host, so one index (two GPUs) is the least
    assert without_mig(h100) <= 1
    for hour, layout in h100.periods:
        assert any(slot != advisor.WHOLE_GPU_LAYOUT for slot in layout.slots), 'MIG off on every H100 from %02d:00' % hour


@pytest.mark.parametrize('whole_gpus', [1, 2, 3, 4, 5])
def test_no_more_indices_without_mig_than_the_whole_gpus_asked_for_need(shipped, whole_gpus):
    advice = advisor.advise(mostly_mig(whole_gpus), fleets([H100]), shipped, ((0, 'all-balanced'),))
    assert without_mig(advice.models[0]) <= math.ceil(whole_gpus / 2.0)


def test_whole_gpus_asked_for_are_still_served(shipped):
    advice = advisor.advise(mostly_mig(2), fleets([H100]), shipped, ((0, 'all-balanced'),))
    assert without_mig(advice.models[0]) == 1
    assert advice.outcomes[advice.choice].placed() > advice.outcomes['current'].placed()


def one_pod_an_hour_a_day():
    """Twenty 1g.10gb all day on 2 x 4 H100, and one nvidia.com/gpu pod 09:00-10:00."""
    return demand(dict((h, {'nvidia.com/mig-1g.10gb': 20.0, 'nvidia.com/gpu': 1.0 if h == 9 else 0.0}) for h in range(24)))


def test_mig_is_taken_off_only_where_the_replay_shows_it_beats_the_threshold(shipped):
    """The pod's few requests against the thousands the MIG instances place: under 1 %, so MIG stays on."""
    advice = advisor.advise(one_pod_an_hour_a_day(), fleets([H100]), shipped, ((0, 'all-balanced'),))
    assert without_mig(advice.models[0]) == 0
    served = advisor.advise(one_pod_an_hour_a_day(), fleets([H100]), shipped, ((0, 'all-balanced'),), min_gain=0.0)
    assert without_mig(served.models[0]) == 1
    assert served.outcomes[served.choice].placed() > advice.outcomes[advice.choice].placed()

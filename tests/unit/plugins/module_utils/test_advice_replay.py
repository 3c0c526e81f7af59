# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout advisor's judge (planning/_advice_replay): whole requests replayed against a daily schedule - patience,
holds, busy instances kept through a switch, the rollout's time - and the rollout's batches."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.planning import _advice_demand as demand_input
from ansible_collections.gpufleet.mig.plugins.module_utils.planning import _advice_replay as judge
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_advisor import FleetLayout, ModelFleet
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu

A100 = 'A100-SXM4-80GB'
ONE = 'nvidia.com/mig-1g.10gb'
SEVEN = 'nvidia.com/mig-7g.80gb'
SEVEN_ONES = FleetLayout(((('1g.10gb', 7),),))
ONE_SEVEN = FleetLayout(((('7g.80gb', 1),),))
INSTANT = judge.Rollout(1, 10, 0)


def fleet(hosts=1):
    return ModelFleet(A100, model_gpu(A100), hosts, 1)


def daily(first, second=None, at=12):
    return {A100: tuple(first if second is None or hour < at else second for hour in range(24))}


def test_a_request_waits_its_patience_then_gives_up():
    # eight 1g pods for seven instances: the eighth waits; with 30 min patience it is placed when the first ends at
    # 20 minutes, with 10 it gives up first
    requests = [(0.0, 1200.0 if n == 0 else 7200.0, ONE, 1) for n in range(8)]
    assert judge.replay(requests, 1, [fleet()], daily(SEVEN_ONES), INSTANT, 30).placed() == 8
    outcome = judge.replay(requests, 1, [fleet()], daily(SEVEN_ONES), INSTANT, 10)
    assert (outcome.placed(), outcome.unplaced()) == (7, 1)


def test_a_held_instance_stays_through_a_switch_and_the_rest_is_never_built():
    # a 1g held from 11:00 to 14:00: the switch to a 7g at 12:00 keeps it, and a 7g cannot fit beside it; the
    # in-place switch does not come back, so the 7g asked at 15:00 is not placed
    requests = [(11 * 3600.0, 3 * 3600.0, ONE, 1), (15 * 3600.0, 600.0, SEVEN, 1)]
    outcome = judge.replay(requests, 1, [fleet()], daily(SEVEN_ONES, ONE_SEVEN), INSTANT, 30)
    assert (outcome.placed(), outcome.unplaced()) == (1, 1)
    # with the 1g gone before the switch, the 7g is built
    requests = [(11 * 3600.0, 1800.0, ONE, 1), (15 * 3600.0, 600.0, SEVEN, 1)]
    assert judge.replay(requests, 1, [fleet()], daily(SEVEN_ONES, ONE_SEVEN), INSTANT, 30).placed() == 2


def test_while_a_host_switches_only_the_instances_both_layouts_have_serve():
    # from 7x1g to 4x1g+3g at 12:00, 20 minutes a host: a 3g asked at 12:01 with 10 minutes' patience is lost, one
    # asked at 12:25 placed; a 1g at 12:01 finds one of the four both layouts have
    after = FleetLayout(((('1g.10gb', 4), ('3g.40gb', 1)),))
    slow = judge.Rollout(1, 10, 1200)
    three = 'nvidia.com/mig-3g.40gb'
    requests = [(12 * 3600.0 + 60, 600.0, three, 1), (12 * 3600.0 + 60, 600.0, ONE, 1), (12 * 3600.0 + 1500, 600.0, three, 1)]
    outcome = judge.replay(requests, 1, [fleet()], daily(SEVEN_ONES, after), slow, 10)
    assert (outcome.placed(), outcome.unplaced()) == (2, 1)


def test_requests_still_waiting_at_the_window_s_end_are_unplaced_and_counted_by_arrival_day():
    requests = [(3600.0, 600.0, SEVEN, 1), (2 * 86400.0 - 60, 600.0, SEVEN, 1), (2 * 86400.0 - 50, 600.0, SEVEN, 1)]
    outcome = judge.replay(requests, 2, [fleet()], daily(ONE_SEVEN), INSTANT, 30)
    assert outcome.placed_by_day == (1, 1) and outcome.unplaced_by_day == (0, 1)


def test_a_pod_of_several_devices_takes_them_on_one_host():
    requests = [(0.0, 600.0, SEVEN, 2), (0.0, 600.0, SEVEN, 1)]
    # two hosts of one 7g each: no host has two, the pod of two waits; the pod of one behind it is placed
    outcome = judge.replay(requests, 1, [fleet(hosts=2)], daily(ONE_SEVEN), INSTANT, 30)
    assert (outcome.placed(), outcome.unplaced()) == (1, 1)


@pytest.mark.parametrize('rollout, hosts, batches', [
    (judge.Rollout(1, 10, 35), 3, [(0, 35, 1), (35, 35, 1), (70, 35, 1)]),
    (judge.Rollout(4, 2, 35), 10, [(0, 70, 4), (70, 70, 4), (140, 35, 2)]),
    (judge.Rollout('25%', 10, 30), 8, [(0, 30, 2), (30, 30, 2), (60, 30, 2), (90, 30, 2)]),
    (judge.Rollout(100, 10, 30), 25, [(0, 90, 25)]),
])
def test_a_rollout_s_batches_are_serial_hosts_with_the_forks_there_are(rollout, hosts, batches):
    assert rollout.batches(hosts) == batches
    assert rollout.seconds(hosts) == batches[-1][0] + batches[-1][1]


@pytest.mark.parametrize('rollout, message', [
    (judge.Rollout(0, 10, 35), 'serial'), (judge.Rollout('0%', 10, 35), 'serial'), (judge.Rollout(True, 10, 35), 'serial'),
    (judge.Rollout(1, 0, 35), 'forks'), (judge.Rollout(1, 10, -1), 'measured switch time'),
])
def test_bad_rollout_settings_are_said_in_one_line(rollout, message):
    assert message in rollout.problem()


def test_a_large_fleet_is_replayed_on_a_sample_with_the_whole_fleet_s_rollout():
    sampled, share = judge.sample([fleet(hosts=320)])
    assert (share, sampled[0].hosts) == (0.1, 32)
    assert judge.sample([fleet(hosts=32)]) == ([fleet(hosts=32)], 1.0)
    # and as many of the requests: every tenth recorded one
    recorded = demand_input.demand_from_requests([{'arrival': n, 'hold': 60, 'resource': ONE} for n in range(1000)], 1)
    assert [r[0] for r in recorded.whole_requests({ONE}, share)] == [float(n) for n in range(9, 1000, 10)]
    # 320 real hosts, ten at a time: 32 batches of 35 s, each with the sample host that stands for its ten
    batches = judge._host_batches([(sampled[0], SEVEN_ONES)], {A100: [[]] * 32}, judge.Rollout(10, 10, 35), share)
    assert len(batches) == 32 and batches[-1][0] == 31 * 35 and all(len(hosts) == 1 for dummy, dummy2, hosts in batches)


def test_a_host_with_gpus_of_two_models_is_one_host_of_the_rollout():
    a100 = ModelFleet(A100, model_gpu(A100), 2, 1, (0,), ('n1', 'n2'))
    h100 = ModelFleet('H100-SXM5-80GB', model_gpu('H100-SXM5-80GB'), 1, 1, (1,), ('n1',))
    batches = judge._host_batches([(a100, SEVEN_ONES), (h100, SEVEN_ONES)], {A100: [[], []], 'H100-SXM5-80GB': [[]]},
                                  judge.Rollout(1, 10, 35))
    # n1 (its A100 and its H100) then n2: two batches, not three
    assert [(offset, sorted(h[:2] for h in hosts)) for offset, seconds, hosts in batches] == [
        (0, [(A100, 0), ('H100-SXM5-80GB', 0)]), (35, [(A100, 1)])]

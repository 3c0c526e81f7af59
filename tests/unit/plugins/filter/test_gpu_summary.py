# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The compact summary nvidia_mig_facts computes on the host for the report and the fleet map: the map drawn from
it is the map drawn from the whole facts, it carries nothing the map does not read, and the report's lines and
figures come from it; a sliced report's parts merge into one fleet."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter.mig_fleet_map import (
    mig_fleet_map,
    mig_report_cached_records,
    mig_report_lines,
    mig_report_merge,
    mig_report_part,
    mig_report_records,
    mig_report_totals,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_summary import (
    MapInputError,
    age_text,
    cached_record,
    cached_summary,
    gpu_summary,
    host_summary,
    known_host_gpus,
    view_of_summary,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import known_gpus
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts

from .fleet_samples import host_gpus, large_fleet, sample_fleet, simulated_gpu

GENERATED = 'generated 2026-12-04 00:00:00 UTC'
SUMMARY_KEYS = ['allocated_to', 'figures', 'gpu_instances', 'in_layout', 'index', 'mig_capable', 'mig_mode', 'name',
                'pci_device_id', 'pci_subsystem_id', 'processes', 'ranks', 'slices', 'total_slices', 'uuid']


def summarised(fleet):
    """The fleet's records as playbooks/mig_report.yml hands them to the map: each host's summary, via JSON."""
    return [{'host': record['host'], 'summary': json.loads(json.dumps(host_summary(record['layout'], record['gpus'])))}
            for record in fleet]


def test_the_map_from_the_summaries_is_the_map_from_the_whole_facts():
    fleet = sample_fleet()
    assert mig_fleet_map(summarised(fleet), 'MIG fleet map', GENERATED) == mig_fleet_map(fleet, 'MIG fleet map', GENERATED)
    # with a planned change too, and a host whose facts could not be read
    plan = {'layout': 'nighttime', 'gpus': [{'index': 0, 'in_layout': False, 'after': [], 'destroyed_instances': [],
                                             'pods_to_evict': []}]}
    failed = {'host': 'gpu-lost', 'failed': 'unreachable'}
    full = [dict(fleet[2], plan=plan), failed]
    compact = [dict(summarised([fleet[2]])[0], plan=plan), failed]
    assert mig_fleet_map(compact) == mig_fleet_map(full)


def test_the_summary_carries_what_the_map_reads_and_nothing_more():
    gpus = host_gpus([simulated_gpu('A100-SXM4-80GB', [('1g.10gb', 0, []), ('1g.10gb', 3, [4200]), ('3g.40gb', 4, [])]),
                      simulated_gpu('A100-SXM4-80GB', mig='disabled', pending='enabled', pids=[77]),
                      simulated_gpu('L40S', mig='disabled')], in_layout={0: True, 1: False},
                     allocations={(0, 0): ['team-a/notebook-1']})
    first, disabled, whole = [gpu_summary(gpu) for gpu in gpus]
    for summary in (first, disabled, whole):
        assert sorted(summary) == SUMMARY_KEYS
    # no profiles, placements, compute profiles nor per-process memory: the map computes nothing from them; the PCI ids
    # are the rollout pre-flight's (device-filters)
    assert 'profiles' not in json.dumps(first) and 'placements' not in json.dumps(first)
    assert first['slices'] == [0, 'free', 'free', 1, 2, 2, 2, 2]
    assert first['figures'] == {'free_slices': 2, 'stranded_slices': 0, 'largest_placeable': '1g.10gb', 'fragmentation': 0.5,
                                'repacked_largest_placeable': '2g.20gb'}
    # the order of the profiles the figures name, to sort a model's largest placeable profiles
    assert first['ranks'] == {'1g.10gb': [1, 1, 9728, True, '1g.10gb'], '2g.20gb': [2, 2, 19968, True, '2g.20gb']}
    assert [(gi['profile'], gi['start'], gi['size'], gi['pids'], gi['busy'], gi['allocated_to']) for gi in first['gpu_instances']] == [
        ('1g.10gb', 0, 1, [], False, ['team-a/notebook-1']), ('1g.10gb', 3, 1, [4200], True, []),
        ('3g.40gb', 4, 4, [], False, [])]
    assert (disabled['mig_mode'], disabled['figures'], disabled['slices'], disabled['processes']) == (
        {'current': 'disabled', 'pending': 'enabled'}, None, [], [77])
    assert (whole['mig_capable'], whole['mig_mode']['current'], whole['in_layout']) == (False, 'unsupported', None)


def values(data):
    """How many values ansible-core walks in a result: every dict, list and scalar."""
    if isinstance(data, dict):
        return 1 + sum(values(value) for value in data.values())
    if isinstance(data, list):
        return 1 + sum(values(value) for value in data)
    return 1


def test_a_host_summary_is_a_fraction_of_its_facts_and_a_few_values():
    """The point of the summary: 1000 hosts x 8 GPUs of facts (91 MB) must not travel through the controller, and
    ansible-core's cost is per value: the GPUs travel as one JSON text, the report's lines and figures beside it."""
    host = large_fleet(hosts=1)[0]
    summary = host_summary(host['layout'], host['gpus'])
    assert len(json.dumps(summary)) * 4 < len(json.dumps(host['gpus']))
    assert values(summary) < 30 < 2000 < values(host['gpus'])
    assert json.loads(summary['map']) == [gpu_summary(gpu) for gpu in host['gpus']]
    assert mig_fleet_map([{'host': 'h', 'summary': summary}]) == mig_fleet_map(
        [{'host': 'h', 'summary': {'layout': 'daytime', 'gpus': json.loads(summary['map'])}}])
    with pytest.raises(AnsibleFilterError, match='^mig_fleet_map: host h summary: map is not the JSON of the GPU summaries'):
        mig_fleet_map([{'host': 'h', 'summary': dict(summary, map='[{')}])


def test_a_summary_tells_the_gpus_of_the_facts_it_was_made_from():
    """The rollout's pre-flight reads a host's summary, not its facts (a fact cache would decode the facts again at each
    later variable lookup of the host): it knows the same MIG-capable GPUs from it, their PCI ids included, for a
    layout's device-filters. The fact kept from the last decision comes first, the facts next; a summary made before it
    carried the PCI ids, or one that cannot be read, tells nothing, so that no layout is refused on a guess."""
    told = []
    for record in sample_fleet():
        facts = {'gpus': record['gpus']}
        summary = json.loads(json.dumps(host_summary(record['layout'], record['gpus'])))
        assert known_host_gpus(summary=summary) == known_gpus(facts)
        told.extend(gpu['pci_device_id'] for gpu in known_gpus(facts))
    assert told and all(told)
    record = sample_fleet()[0]
    facts = {'gpus': record['gpus']}
    summary = host_summary(record['layout'], record['gpus'])
    kept = [{'index': 0, 'name': 'NVIDIA A30', 'pci_device_id': '0x20B710DE', 'pci_subsystem_id': None, 'memory_slices': 4}]
    assert known_host_gpus(kept, facts, summary) == kept
    assert known_host_gpus([], facts, summary) == []
    assert known_host_gpus(None, facts, {'map': '[{'}) == known_gpus(facts)
    assert known_host_gpus(None, {'gpus': []}, summary) == []
    without_ids = json.dumps([dict((key, value) for key, value in gpu.items() if key != 'pci_device_id')
                              for gpu in json.loads(summary['map'])])
    assert known_host_gpus(None, None, dict(summary, map=without_ids)) is None
    assert known_host_gpus(None, None, dict(summary, map='[{')) is None
    assert known_host_gpus(None, None, 'not a summary') is None
    assert known_host_gpus() is None
    # This run's decision comes before all of them where it told the GPUs (the rollout's pre-flight decides first).
    decided = {'gpus': [dict(gpu, mig_capable=True) for gpu in kept], 'unmatched_gpus': []}
    assert known_host_gpus(None, facts, summary, decided) == known_gpus(decided) != known_gpus(facts)
    assert known_host_gpus(kept, facts, summary, {'skipped': True}) == kept
    assert known_host_gpus(None, facts, summary, {'failed': True, 'msg': 'NVML'}) == known_gpus(facts)


def test_the_report_lines_and_totals():
    gpus = host_gpus([simulated_gpu('A100-SXM4-80GB', [('1g.10gb', 0, []), ('1g.10gb', 3, [4200]), ('1g.10gb', 6, [])]),
                      simulated_gpu('A100-SXM4-80GB', mig='disabled', pending='enabled'),
                      simulated_gpu('A30', [('1g.6gb', start, []) for start in range(4)]),
                      simulated_gpu('L40S', mig='disabled')], in_layout={0: False, 1: None, 2: True})
    summary = host_summary('daytime', gpus)
    assert summary['layout'] == 'daytime'
    assert summary['lines'] == [
        'GPU 0 A100-SXM4-80GB: MIG enabled, 3x1g.10gb; 5 free slice(s), largest placeable 2g.20gb, 1 stranded, '
        'fragmentation 0.50, busy, NOT in layout',
        'GPU 1 A100-SXM4-80GB: MIG disabled (pending enabled) (profiles and free space known once MIG is enabled)',
        'GPU 2 A30: MIG enabled, 4x1g.6gb; 0 free slice(s), largest placeable -, 0 stranded, fragmentation 0.00, in layout',
        'GPU 3 L40S: no MIG',
    ]
    assert summary['totals'] == {'gpus': 4, 'mig_enabled': 2, 'out_of_layout': 1, 'instances': 7, 'free_slices': 5,
                                 'stranded_slices': 1, 'busy_gpus': 1}


@pytest.mark.parametrize('change, message', [
    (lambda gpu: gpu.update(slices=gpu['slices'][:-1]), 'host h GPU 0: slices must give each of the 8 memory slices'),
    (lambda gpu: gpu['slices'].__setitem__(0, 9), 'host h GPU 0: slices must give each of the 8 memory slices'),
    (lambda gpu: gpu['gpu_instances'][0].update(start=7, size=4), 'host h GPU 0 GPU instance [0-9]+: slices 7 to 10 are not'),
    (lambda gpu: gpu['mig_mode'].update(current='on'), 'host h GPU 0: mig_mode.current must be enabled or disabled'),
    (lambda gpu: gpu['figures'].pop('fragmentation'), 'host h GPU 0: figures must have free_slices'),
    (lambda gpu: gpu.pop('total_slices'), 'host h GPU 0: missing total_slices'),
])
def test_a_malformed_summary_is_refused_naming_the_host_and_the_gpu(change, message):
    gpu = gpu_summary(host_gpus([simulated_gpu('A100-SXM4-80GB', [('1g.10gb', s, []) for s in range(7)])])[0])
    view_of_summary(json.loads(json.dumps(gpu)), 'h')
    change(gpu)
    with pytest.raises(MapInputError, match='^' + message):
        view_of_summary(gpu, 'h')
    with pytest.raises(AnsibleFilterError, match='^mig_fleet_map: ' + message):
        mig_fleet_map([{'host': 'h', 'summary': {'layout': None, 'gpus': [gpu]}}])


def test_nvidia_mig_facts_returns_the_summary_instead_of_the_facts(simulated_host, run_module):
    simulated_host([{'model': 'A30', 'mig': {'current': 'enabled', 'pending': 'enabled'},
                     'gpu_instances': [{'profile': '2g.12gb', 'start': 0, 'compute_instances': [{'profile': '2g.12gb', 'start': 0}]}]}])
    before = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None, microsecond=0)
    result, failed = run_module(nvidia_mig_facts.main, {'summary': True})
    after = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    assert not failed, result
    # only the summary, as a fact (a fact cache keeps it), with the time the host read it
    assert list(result['ansible_facts']) == ['nvidia_mig_summary'] and 'summary' not in result
    summary = dict(result['ansible_facts']['nvidia_mig_summary'])
    read_at = datetime.datetime.strptime(summary.pop('read_at'), '%Y-%m-%dT%H:%M:%SZ')
    assert before <= read_at <= after
    facts, failed = run_module(nvidia_mig_facts.main, {})
    assert summary == host_summary(None, facts['ansible_facts']['nvidia_mig']['gpus'], 'this host')
    assert summary['lines'] == ['GPU 0 A30: MIG enabled, 1x2g.12gb; 2 free slice(s), largest placeable 2g.12gb, '
                                '0 stranded, fragmentation 0.00']


class Hostvars(dict):
    """hostvars as a filter sees them: host -> its variables."""


def test_records_of_a_job_and_a_sliced_jobs_parts_merged():
    fleet = summarised(sample_fleet())
    hostvars = Hostvars((record['host'], {'mig_report_host': {'changed': False, 'ansible_facts': {
        'nvidia_mig_summary': dict(record['summary'], read_at='2026-12-04T06:00:00Z')}}}) for record in fleet)
    hostvars['gpu-lost'] = {'mig_report_failed': 'unreachable'}
    hostvars['not-a-gpu-host'] = {}
    hosts = sorted(hostvars)
    records = mig_report_records(hosts, hostvars)
    assert [r['host'] for r in records] == sorted(r['host'] for r in fleet + [{'host': 'gpu-lost'}])
    assert [r for r in records if r['host'] == 'gpu-lost'] == [{'host': 'gpu-lost', 'failed': 'unreachable'}]
    line = mig_report_totals(records)
    assert line.startswith('6 host(s), 9 GPU(s), 7 with MIG enabled, 2 not in their declared layout, 19 GPU instance(s), ')
    assert line.endswith('layouts: daytime, nighttime, none')
    # Two slices publish their parts (a relaunched slice reports a host again: the later job's record wins).
    first = mig_report_part(records[:3], 41)
    second = mig_report_part(records[2:], 42)
    assert list(first) == ['mig_report_part_41']
    stale = dict(records[2], failed='old')
    merged = mig_report_merge(dict(mig_report_part([stale], 40), **dict(first, **second)))
    assert merged == sorted(records, key=lambda r: r['host'])
    assert mig_report_totals(merged) == line
    assert mig_fleet_map(merged, 'MIG fleet map', GENERATED) == mig_fleet_map(records, 'MIG fleet map', GENERATED)
    with pytest.raises(AnsibleFilterError, match='mig_report_part_43 must be the list of host records'):
        mig_report_merge({'mig_report_part_43': 'x'})


# ---- the report from the fact cache (mig_report_source=cache) ----------------------------------------------------

NOW = datetime.datetime(2026, 12, 4, 12, 0, 0)
DAY = 86400


def cached_fleet(read_at):
    """{host: its cached fact nvidia_mig_summary} of the sample fleet, each read at read_at[host] (a datetime)."""
    return dict((record['host'], cached_summary(record['summary'], read_at[record['host']]))
                for record in summarised(sample_fleet()))


def test_a_cached_summary_is_the_summary_with_its_read_time_to_the_second():
    summary = summarised(sample_fleet())[0]['summary']
    fact = cached_summary(summary, datetime.datetime(2026, 12, 4, 6, 5, 7, 999))
    assert fact == dict(summary, read_at='2026-12-04T06:05:07Z') and 'read_at' not in summary


@pytest.mark.parametrize('seconds, text', [(0, '0 min'), (59, '0 min'), (61, '1 min'), (3600 + 120, '1 h 2 min'),
                                           (DAY, '1 d 0 h'), (3 * DAY + 5 * 3600 + 59, '3 d 5 h')])
def test_ages_read_in_days_hours_and_minutes(seconds, text):
    assert age_text(seconds) == text


def test_a_cached_record_says_how_old_the_facts_are_and_when_they_are_stale():
    summary = summarised(sample_fleet())[0]['summary']
    fresh = cached_record('h', cached_summary(summary, NOW - datetime.timedelta(hours=2)), NOW, DAY)
    assert fresh == {'host': 'h', 'source': 'cache', 'summary': summary, 'read_at': '2026-12-04T10:00:00Z', 'age': 7200}
    edge = cached_record('h', cached_summary(summary, NOW - datetime.timedelta(seconds=DAY)), NOW, DAY)
    assert 'stale' not in edge and edge['age'] == DAY
    stale = cached_record('h', cached_summary(summary, NOW - datetime.timedelta(seconds=DAY + 60)), NOW, DAY)
    assert stale['stale'] == 'facts read 2026-12-03T11:59:00Z, 1 d 0 h ago (older than 1 d 0 h)'
    assert stale['summary'] == summary
    # A host clock ahead of the controller's: a few minutes pass, more cannot be trusted.
    ahead = cached_record('h', cached_summary(summary, NOW + datetime.timedelta(minutes=4)), NOW, DAY)
    assert 'stale' not in ahead and ahead['age'] == -240
    ahead = cached_record('h', cached_summary(summary, NOW + datetime.timedelta(hours=1)), NOW, DAY)
    assert ahead['stale'] == 'facts read 2026-12-04T13:00:00Z, 1 h 0 min in the future of this controller (clocks differ)'


@pytest.mark.parametrize('fact, reason', [
    (None, 'no cached MIG facts: no report with a fact cache has read this host yet, or its cache entry expired; run the '
           'report live (mig_report_source=live)'),
    ({'layout': None, 'lines': []}, 'the cached MIG facts are not a summary of nvidia_mig_facts (summary: true)'),
    ('text', 'the cached MIG facts are not a summary of nvidia_mig_facts (summary: true)'),
    ({'map': '[]'}, "host h cached facts: read_at must be a UTC time such as 2026-12-04T06:00:00Z, got None"),
    ({'map': '[]', 'read_at': '2026-12-04 06:00'}, "host h cached facts: read_at must be a UTC time such as "
                                                   "2026-12-04T06:00:00Z, got '2026-12-04 06:00'"),
])
def test_a_host_the_cache_lacks_or_holds_no_usable_summary_of_is_listed_as_not_read(fact, reason):
    assert cached_record('h', fact, NOW, DAY) == {'host': 'h', 'source': 'cache', 'failed': reason}


def test_records_from_the_cache_lines_totals_and_map():
    hosts = [record['host'] for record in sample_fleet()]
    read_at = dict((host, NOW - datetime.timedelta(minutes=30)) for host in hosts)
    read_at[hosts[1]] = NOW - datetime.timedelta(days=2)
    facts = cached_fleet(read_at)
    # as hostvars carry a fact: top level (inject_facts_as_vars), or only under ansible_facts
    hostvars = Hostvars((host, {'nvidia_mig_summary': facts[host]}) for host in hosts[:2])
    hostvars.update((host, {'ansible_facts': {'nvidia_mig_summary': facts[host]}}) for host in hosts[2:])
    hostvars['gpu-new'] = {'inventory_hostname': 'gpu-new'}
    records = mig_report_cached_records(hosts + ['gpu-new'], hostvars, NOW, DAY)
    assert [r['host'] for r in records] == hosts + ['gpu-new']
    assert [r.get('stale') is not None for r in records[:-1]] == [host == hosts[1] for host in hosts]
    assert records[-1]['failed'].startswith('no cached MIG facts')
    # an aware time of another zone is the same moment
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    assert mig_report_cached_records(hosts + ['gpu-new'], hostvars, NOW.replace(tzinfo=datetime.timezone.utc).astimezone(plus_two),
                                     DAY) == records
    lines = mig_report_lines(records)
    live = mig_report_lines(summarised(sample_fleet()))
    assert lines[hosts[0]] == ['facts read 2026-12-04T11:30:00Z, 30 min ago (fact cache)'] + live[hosts[0]]
    assert lines[hosts[1]] == ['facts read 2026-12-02T12:00:00Z, 2 d 0 h ago (older than 1 d 0 h)'] + live[hosts[1]]
    assert lines['gpu-new'] == ['facts not read: ' + records[-1]['failed']]
    line = mig_report_totals(records)
    assert line.startswith('%d host(s), ' % (len(hosts) + 1))
    assert line.endswith('; from the fact cache: facts 30 min to 2 d 0 h old, 1 host(s) with stale facts, 1 without cached facts')
    assert '; from the fact cache' not in mig_report_totals([{'host': r['host'], 'summary': r['summary']} for r in records[:-1]])
    assert mig_report_totals([records[-1]]).endswith('; from the fact cache: facts - to - old, 0 host(s) with stale facts, '
                                                     '1 without cached facts')
    # the map: the stale host needs attention (its GPUs drawn as cached), the one the cache lacks is not read
    page = mig_fleet_map(records, 'MIG fleet map', GENERATED)
    assert ('data-host="%s" data-gpu="" data-model="" data-states="stale"' % hosts[1]) in page
    assert 'data-host="gpu-new" data-gpu="" data-model="" data-states="failed"' in page
    assert page.count('data-states="stale"') == 1
    fresh = [dict(r, stale=None) if r['host'] == hosts[1] else r for r in records]
    assert 'data-states="stale"' not in mig_fleet_map(fresh, 'MIG fleet map', GENERATED)


@pytest.mark.parametrize('now, max_age, message', [
    ('2026-12-04', DAY, 'now must be a datetime'),
    (NOW, -1, 'max_age must be a number of 0 or more'),
    (NOW, '86400', 'max_age must be a number of 0 or more'),
])
def test_cached_records_refuse_a_bad_time_or_max_age(now, max_age, message):
    with pytest.raises(AnsibleFilterError, match='^mig_fleet_map: ' + message):
        mig_report_cached_records([], Hostvars(), now, max_age)


def test_a_stale_reason_that_is_not_text_is_refused():
    record = dict(summarised(sample_fleet())[0], stale=3)
    with pytest.raises(AnsibleFilterError, match='stale must be a reason'):
        mig_fleet_map([record])

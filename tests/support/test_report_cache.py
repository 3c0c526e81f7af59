# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/mig_report.yml with a fact cache: the live report leaves each host's summary in the cache with the time it
was read; mig_report_source=cache then draws the fleet from the cache alone, contacting no host, and says how old each
host's facts are, lists stale ones as needing attention and a host the cache lacks as not read; a source it cannot use
is refused with one line before anything runs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import os

import pytest

from .playbook import run_playbook
from .test_rollout_check import HOSTS, INVENTORY, daytime_fleet_state, fleet_run

LINES_TASK = 'Report the layout and fragmentation of each GPU'
TOTALS_TASK = 'Summarise the hosts of this job'
MISSING = 'sim-h200-01'
STALE = 'sim-a30-01'


def report(state_dir, tmp_path, **extravars):
    """playbooks/mig_report.yml with the jsonfile fact cache tmp_path/facts, as AWX runs it with fact storage."""
    extravars['gpufleet_sim_state_dir'] = state_dir
    return run_playbook('playbooks/mig_report.yml', inventory=INVENTORY, extravars=extravars,
                        fact_cache=str(tmp_path / 'facts'))


def fact_cache(tmp_path):
    """The jsonfile cache of the runs, read and written as ansible-playbook does (its own plugin: the file format is
    ansible-core's)."""
    from ansible.plugins.loader import cache_loader
    return cache_loader.get('jsonfile', _uri=str(tmp_path / 'facts'))


@pytest.fixture(scope='module')
def daytime_fleet(tmp_path_factory):
    """The simulated fleet in daytime; yields its state dir."""
    with daytime_fleet_state(tmp_path_factory) as state_dir:
        yield state_dir


@pytest.fixture
def cached_fleet(ansible_env, daytime_fleet, tmp_path):
    """The live report run with a jsonfile fact cache; then the cache entry of MISSING removed and STALE's read 3 days
    earlier. Yields the live run."""
    live = report(daytime_fleet, tmp_path, mig_report_map_path=str(tmp_path / 'live.html'))
    assert live.rc == 0, live.describe()
    cache = fact_cache(tmp_path)
    assert cache.contains(MISSING)
    cache.delete(MISSING)
    facts = cache.get(STALE)
    read_at = datetime.datetime.strptime(facts['nvidia_mig_summary']['read_at'], '%Y-%m-%dT%H:%M:%SZ')
    facts['nvidia_mig_summary']['read_at'] = (read_at - datetime.timedelta(days=3)).strftime('%Y-%m-%dT%H:%M:%SZ')
    cache.set(STALE, facts)
    yield live


def test_the_live_report_leaves_each_hosts_summary_in_the_fact_cache_with_its_read_time(cached_fleet, tmp_path):
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    for host in HOSTS:
        if host == MISSING:
            continue
        summary = fact_cache(tmp_path).get(host)['nvidia_mig_summary']
        assert sorted(summary) == ['layout', 'lines', 'map', 'read_at', 'totals'], host
        read_at = datetime.datetime.strptime(summary['read_at'], '%Y-%m-%dT%H:%M:%SZ')
        assert abs((now - read_at).total_seconds()) < (3 * 86400 + 600 if host == STALE else 600), (host, summary['read_at'])
    live_lines = cached_fleet.task_results(LINES_TASK)['localhost']['msg']
    assert live_lines['sim-a100-01'][0] == 'declared layout: daytime'


def test_the_report_from_the_cache_contacts_no_host_and_says_how_old_each_hosts_facts_are(cached_fleet, tmp_path):
    # A state folder that does not exist: any host read would fail.
    run = report(str(tmp_path / 'no-such-fleet'), tmp_path, mig_report_source='cache',
                 mig_report_map_path=str(tmp_path / 'cached.html'))
    assert run.rc == 0, run.describe()
    contacted = set(e['event_data'].get('host') for e in run.events if e.get('event', '').startswith('runner_on_'))
    assert contacted == {'localhost'}, contacted
    lines = run.task_results(LINES_TASK)['localhost']['msg']
    live = cached_fleet.task_results(LINES_TASK)['localhost']['msg']
    assert sorted(lines) == sorted(HOSTS)
    fresh = [host for host in HOSTS if host not in (MISSING, STALE)]
    for host in fresh:
        assert lines[host][0].startswith('facts read ') and lines[host][0].endswith(' min ago (fact cache)'), lines[host]
        assert lines[host][1:] == live[host]
    assert lines[STALE][0].startswith('facts read ') and lines[STALE][0].endswith(' ago (older than 1 d 0 h)'), lines[STALE]
    assert ' 3 d 0 h ' in lines[STALE][0] and lines[STALE][1:] == live[STALE]
    assert lines[MISSING] == ['facts not read: no cached MIG facts: no report with a fact cache has read this host yet, or '
                              'its cache entry expired; run the report live (mig_report_source=live)']
    totals = run.task_results(TOTALS_TASK)['localhost']['msg']
    assert totals.startswith('6 host(s), ') and totals.endswith(' old, 1 host(s) with stale facts, 1 without cached facts'), totals
    with open(str(tmp_path / 'cached.html')) as handle:
        page = handle.read()
    assert 'from the fact cache (no host contacted)' in page
    assert 'data-host="%s" data-gpu="" data-model="" data-states="stale"' % STALE in page
    assert 'data-host="%s" data-gpu="" data-model="" data-states="failed"' % MISSING in page
    # a larger mig_report_max_age: the same facts are no longer stale
    run = report(str(tmp_path / 'no-such-fleet'), tmp_path, mig_report_source='cache', mig_report_max_age=4 * 86400,
                 mig_report_map_path=str(tmp_path / 'cached.html'))
    lines = run.task_results(LINES_TASK)['localhost']['msg']
    assert run.rc == 0 and lines[STALE][0].endswith(' ago (fact cache)'), (run.describe(), lines[STALE])


@pytest.mark.parametrize('extravars, message', [
    ({'mig_report_source': 'stale'}, 'mig_report_source must be live (read each host) or cache (the fact cache, no host '
                                     'contacted), got stale'),
    ({'mig_report_source': 'cache', 'mig_report_layout': 'nighttime'},
     'mig_report_layout plans the switch on each host: run it with mig_report_source=live'),
])
def test_a_report_source_that_cannot_be_used_is_refused_before_any_host_is_read(ansible_env, tmp_path, extravars, message):
    run = fleet_run(str(tmp_path / 'no-such-fleet'), 'playbooks/mig_report.yml', mig_report_map_path=str(tmp_path / 'map.html'),
                    **extravars)
    assert run.rc != 0 and run.failed == ['localhost'], run.describe()
    assert run.messages == {'localhost': [message]}, run.messages
    contacted = set(e['event_data'].get('host') for e in run.events if e.get('event', '').startswith('runner_on_'))
    assert contacted == {'localhost'} and not os.path.exists(str(tmp_path / 'map.html'))

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The current schedule's AWX switch hours in the advisor's UTC hours (planning/_layout_advisor.schedule_from_switches):
a switch's time is local to its timezone, else awx_schedule_timezone, as playbooks/awx_configure.yml reads it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.planning import _layout_advisor as advisor

WINTER = calendar.timegm((2026, 1, 5, 0, 0, 0))   # a UTC midnight: Europe/Berlin is UTC+1, America/New_York UTC-5
SUMMER = calendar.timegm((2026, 7, 6, 0, 0, 0))   # Europe/Berlin UTC+2, America/New_York UTC-4
DAY_NIGHT = [{'layout': 'daytime', 'time': '08:00'}, {'layout': 'nighttime', 'time': '20:00'}]


@pytest.mark.parametrize('zone, start, expected', [
    ('UTC', WINTER, ((8, 'daytime'), (20, 'nighttime'))),
    ('Europe/Berlin', WINTER, ((7, 'daytime'), (19, 'nighttime'))),
    ('Europe/Berlin', SUMMER, ((6, 'daytime'), (18, 'nighttime'))),
    ('America/New_York', WINTER, ((1, 'nighttime'), (13, 'daytime'))),
    ('America/New_York', SUMMER, ((0, 'nighttime'), (12, 'daytime'))),
    # 08:00 in Tokyo is 23:00 UTC the day before
    ('Asia/Tokyo', WINTER, ((11, 'nighttime'), (23, 'daytime'))),
    # 08:00 in Kolkata is 02:30 UTC: the advisor works by the hour
    ('Asia/Kolkata', WINTER, ((2, 'daytime'), (14, 'nighttime'))),
])
def test_switch_hours_are_converted_to_utc(zone, start, expected):
    assert advisor.schedule_from_switches(DAY_NIGHT, zone, start) == expected


def test_a_switch_s_own_timezone_wins_over_the_schedules():
    switches = [{'layout': 'daytime', 'time': '08:00', 'timezone': 'UTC'},
                {'layout': 'nighttime', 'time': '20:00', 'timezone': 'Europe/Berlin'}]
    assert advisor.schedule_from_switches(switches, 'America/New_York', WINTER) == ((8, 'daytime'), (19, 'nighttime'))


def test_the_advisor_s_own_output_reads_back_as_it_was_written():
    """The advised switches carry timezone UTC: read with any awx_schedule_timezone, their hours are unchanged."""
    written = [{'layout': 'advised-0800', 'time': '08:00', 'timezone': 'UTC'}]
    assert advisor.schedule_from_switches(written, 'Europe/Berlin', SUMMER) == ((8, 'advised-0800'),)


@pytest.mark.parametrize('zone', ['Europe/Berln', 'Mars/Olympus', '', 'Europe', '../etc/passwd'])
def test_an_unknown_timezone_is_refused_in_one_line_naming_it(zone):
    with pytest.raises(advisor.AdvisorError) as caught:
        advisor.schedule_from_switches(DAY_NIGHT, zone, WINTER)
    message = str(caught.value)
    assert '\n' not in message
    assert 'timezone %r' % (zone,) in message


def test_a_switch_naming_an_unknown_timezone_is_refused():
    with pytest.raises(advisor.AdvisorError, match="unknown timezone 'CEST'"):
        advisor.schedule_from_switches([{'layout': 'daytime', 'time': '08:00', 'timezone': 'CEST'}], 'UTC', WINTER)


def test_two_local_times_on_one_utc_hour_are_refused():
    switches = [{'layout': 'daytime', 'time': '08:00', 'timezone': 'UTC'},
                {'layout': 'nighttime', 'time': '09:00', 'timezone': 'Europe/Berlin'}]
    with pytest.raises(advisor.AdvisorError, match='distinct'):
        advisor.schedule_from_switches(switches, 'UTC', WINTER)

# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter gpufleet.mig.awx_rrule, the code awx_configure.yml builds its schedules with.

The rules are expanded as AWX expands them (dateutil.rrule.rrulestr) on the days around
daylight-saving changes: the local wall-clock time stays, the UTC offset moves.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter.awx_rrule import FilterModule, awx_rrule

from .conftest import awx_vars
from .dst import DST_CHANGES, check_wall_clock_across_dst, dateutil_zone_known, local_runs

DEFAULTS = awx_vars()
SWITCHES = [(switch['layout'], switch['time']) for switch in DEFAULTS['awx_layout_switches']]


def playbook_rule(time, timezone, weekdays=None):
    """The rule awx_configure.yml builds for one switch with the default start date."""
    return awx_rrule(time, timezone, DEFAULTS['awx_schedule_weekdays'] if weekdays is None else weekdays,
                     DEFAULTS['awx_schedule_start_date'])


def test_filter_is_registered():
    assert FilterModule().filters() == {'awx_rrule': awx_rrule}


def test_default_switches_are_daytime_at_8_and_nighttime_at_20():
    assert SWITCHES == [('daytime', '08:00'), ('nighttime', '20:00')]
    assert DEFAULTS['awx_schedule_weekdays'] == []
    assert playbook_rule('08:00', 'UTC') == 'DTSTART;TZID=UTC:20250101T080000 RRULE:FREQ=DAILY;INTERVAL=1'


@pytest.mark.parametrize('zone, change_day', DST_CHANGES, ids=['%s-%s' % (z, d) for z, d in DST_CHANGES])
@pytest.mark.parametrize('layout, time', SWITCHES)
def test_daily_rule_keeps_local_time_across_dst(zone, change_day, layout, time):
    rule = playbook_rule(time, zone)
    assert rule.startswith('DTSTART;TZID=%s:' % zone)
    assert dateutil_zone_known(zone)
    check_wall_clock_across_dst(rule, zone, change_day, time)


def test_berlin_spring_change_in_utc():
    """The concrete UTC times: 07:00Z/19:00Z in winter, 06:00Z/18:00Z from the change on."""
    for time, before, after in (('08:00', '07:00', '06:00'), ('20:00', '19:00', '18:00')):
        utc_before, utc_after = check_wall_clock_across_dst(
            playbook_rule(time, 'Europe/Berlin'), 'Europe/Berlin', datetime.date(2026, 3, 29), time)
        assert (utc_before.date(), utc_before.strftime('%H:%M')) == (datetime.date(2026, 3, 28), before)
        assert (utc_after.date(), utc_after.strftime('%H:%M')) == (datetime.date(2026, 3, 29), after)


def test_new_york_autumn_change_in_utc():
    utc_before, utc_after = check_wall_clock_across_dst(
        playbook_rule('20:00', 'America/New_York'), 'America/New_York', datetime.date(2026, 11, 1), '20:00')
    assert utc_before.strftime('%m-%d %H:%M') == '11-01 00:00'   # 20:00 EDT on 31 October
    assert utc_after.strftime('%m-%d %H:%M') == '11-02 01:00'    # 20:00 EST on 1 November


@pytest.mark.parametrize('weekdays', [['MO', 'TU', 'WE', 'TH', 'FR'], ['weekdays'], 'mon,tue,wed,thu,fri',
                                      ['Friday', 'thursday', 'WED', 'tue', 'mo']])
def test_weekday_rule_keeps_local_time_across_dst(weekdays):
    rule = playbook_rule('08:00', 'Europe/Berlin', weekdays)
    assert rule == 'DTSTART;TZID=Europe/Berlin:20250101T080000 RRULE:FREQ=WEEKLY;INTERVAL=1;BYDAY=MO,TU,WE,TH,FR'
    # 25 October 2026 is a Sunday: Friday runs on CEST, Monday on CET, both at 08:00.
    for change_day in (datetime.date(2026, 3, 29), datetime.date(2026, 10, 25)):
        check_wall_clock_across_dst(rule, 'Europe/Berlin', change_day, '08:00', weekdays=(0, 1, 2, 3, 4))


def test_weekend_and_every_day():
    assert playbook_rule('20:00', 'UTC', ['weekend']).endswith('RRULE:FREQ=WEEKLY;INTERVAL=1;BYDAY=SA,SU')
    every_day = ['MO', 'TU', 'WE', 'TH', 'FR', 'SA', 'SU']
    assert playbook_rule('20:00', 'UTC', every_day).endswith('RRULE:FREQ=DAILY;INTERVAL=1')
    assert awx_rrule('20:00', 'UTC') == awx_rrule('20:00', 'UTC', None, '2025-01-01')


def test_start_date_and_date_objects():
    assert awx_rrule('06:30', 'Asia/Kolkata', start_date=datetime.date(2026, 2, 1)) == \
        'DTSTART;TZID=Asia/Kolkata:20260201T063000 RRULE:FREQ=DAILY;INTERVAL=1'


def test_time_in_the_spring_gap_runs_an_hour_later_once():
    """As documented: 02:30 does not exist in Berlin on 29 March 2026; AWX runs it at 01:30Z (03:30 CEST)."""
    rule = playbook_rule('02:30', 'Europe/Berlin')
    day = datetime.date(2026, 3, 29)
    runs = local_runs(rule, 'Europe/Berlin', day, day)
    assert [(local.strftime('%H:%M'), run.strftime('%H:%M')) for local, run in runs] == [('03:30', '01:30')]
    autumn = datetime.date(2026, 10, 25)
    runs = local_runs(rule, 'Europe/Berlin', autumn, autumn)
    assert [(local.strftime('%H:%M'), run.strftime('%H:%M')) for local, run in runs] == [('02:30', '00:30')]


@pytest.mark.parametrize('args, kwargs, reason', [
    (('8:00', 'UTC'), {}, "the time must be HH:MM on a 24-hour clock, such as '08:00' or '20:00', got '8:00'"),
    (('24:00', 'UTC'), {}, "got '24:00'"),
    (('08:60', 'UTC'), {}, "got '08:60'"),
    (('8pm', 'UTC'), {}, "got '8pm'"),
    ((1200, 'UTC'), {}, "got the integer 1200 (YAML reads an unquoted 20:00 as the base-60 number 1200: quote it, '20:00')"),
    ((None, 'UTC'), {}, 'the time must be a string HH:MM (24-hour clock), got NoneType None'),
    ((True, 'UTC'), {}, 'got bool True'),
    (('08:00', 'Europe/Berln'), {}, "unknown timezone 'Europe/Berln': use an IANA name such as Europe/Berlin"),
    (('08:00', 'Europe/Berln'), {}, '(did you mean Europe/Berlin'),
    (('08:00', 'CEST'), {}, "unknown timezone 'CEST'"),
    (('08:00', ''), {}, "the timezone must be an IANA name such as Europe/Berlin or UTC, got ''"),
    (('08:00', None), {}, 'got None'),
    (('08:00', 'UTC'), {'weekdays': ['MO', 'XX']}, "unknown weekday 'XX': use MO, TU, WE, TH, FR, SA, SU"),
    (('08:00', 'UTC'), {'weekdays': [1]}, 'unknown weekday 1'),
    (('08:00', 'UTC'), {'weekdays': 5}, 'weekdays must be a list of days (or a comma-separated string), got int 5'),
    (('08:00', 'UTC'), {'start_date': '2025-02-30'}, "start_date '2025-02-30' is not a valid date"),
    (('08:00', 'UTC'), {'start_date': '01/01/2025'}, "start_date must be a date YYYY-MM-DD, got '01/01/2025'"),
    (('08:00', 'UTC'), {'start_date': None}, 'start_date must be a date YYYY-MM-DD, got None'),
])
def test_bad_inputs_fail_with_the_reason(args, kwargs, reason):
    with pytest.raises(AnsibleFilterError) as caught:
        awx_rrule(*args, **kwargs)
    message = str(caught.value)
    assert message.startswith('awx_rrule: ')
    assert reason in message

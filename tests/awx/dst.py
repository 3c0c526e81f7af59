# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Expand AWX schedule rules as AWX does (dateutil.rrule.rrulestr) around daylight-saving changes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from dateutil import rrule as dateutil_rrule
from dateutil import tz as dateutil_tz

try:
    import zoneinfo
except ImportError:  # pragma: no cover - Python < 3.9
    zoneinfo = None

UTC = datetime.timezone.utc

# (timezone, first day on the new UTC offset) in 2026, spring and autumn.
DST_CHANGES = (
    ('Europe/Berlin', datetime.date(2026, 3, 29)),
    ('Europe/Berlin', datetime.date(2026, 10, 25)),
    ('America/New_York', datetime.date(2026, 3, 8)),
    ('America/New_York', datetime.date(2026, 11, 1)),
    ('Australia/Sydney', datetime.date(2026, 4, 5)),
    ('Australia/Sydney', datetime.date(2026, 10, 4)),
)


def runs_in_utc(rule, first_day, last_day):
    """UTC datetimes of the runs of ``rule`` between two dates (inclusive), as AWX computes next_run.

    AWX parses the rule with ``dateutil.rrule.rrulestr(rule, forceset=True)`` and stores each run
    converted to UTC.
    """
    rules = dateutil_rrule.rrulestr(rule, forceset=True)
    start = datetime.datetime.combine(first_day, datetime.time(0, 0)).replace(tzinfo=UTC) - datetime.timedelta(days=1)
    end = datetime.datetime.combine(last_day, datetime.time(0, 0)).replace(tzinfo=UTC) + datetime.timedelta(days=2)
    return [run.astimezone(UTC) for run in rules.between(start, end, inc=True)]


def local_runs(rule, zone_name, first_day, last_day):
    """[(local datetime, UTC datetime), ...] of the runs on the local dates first_day to last_day."""
    zone = zoneinfo.ZoneInfo(zone_name)
    runs = [(run.astimezone(zone), run) for run in runs_in_utc(rule, first_day, last_day)]
    return [(local, run) for local, run in runs if first_day <= local.date() <= last_day]


def _minutes(moment):
    return moment.hour * 60 + moment.minute


def check_wall_clock_across_dst(rule, zone_name, change_day, hhmm, weekdays=None):
    """Assert the rule runs at ``hhmm`` local time on the days around ``change_day``, the UTC offset changing.

    ``weekdays`` (datetime.weekday() numbers) limits the days that must have a run; the others must have none.
    A window of a week on each side keeps a weekday-only rule's runs on both sides of the change.
    """
    first_day, last_day = change_day - datetime.timedelta(days=7), change_day + datetime.timedelta(days=7)
    runs = local_runs(rule, zone_name, first_day, last_day)
    day = first_day
    while day <= last_day:
        expected = [hhmm] if weekdays is None or day.weekday() in weekdays else []
        found = [local.strftime('%H:%M') for local, _run in runs if local.date() == day]
        assert found == expected, 'rule %r in %s on %s: runs at %r, expected %r' % (rule, zone_name, day, found, expected)
        day += datetime.timedelta(days=1)
    before = [(local, run) for local, run in runs if local.date() < change_day]
    after = [(local, run) for local, run in runs if local.date() >= change_day]
    assert before and after, 'no runs on one side of the change'
    offsets_before = set(local.utcoffset() for local, _run in before)
    offsets_after = set(local.utcoffset() for local, _run in after)
    assert len(offsets_before) == 1 and len(offsets_after) == 1, (offsets_before, offsets_after)
    shift = offsets_after.pop() - offsets_before.pop()
    assert shift, 'the UTC offset of %s does not change on %s' % (zone_name, change_day)
    # Same local time, so the UTC time of the run moves back by the offset change.
    utc_before, utc_after = before[-1][1], after[0][1]
    assert (_minutes(utc_after) - _minutes(utc_before)) % (24 * 60) == (-shift.total_seconds() // 60) % (24 * 60), (
        utc_before, utc_after, shift)
    return utc_before, utc_after


def dateutil_zone_known(zone_name):
    """dateutil (what AWX expands with) resolves the timezone name too."""
    return dateutil_tz.gettz(zone_name) is not None

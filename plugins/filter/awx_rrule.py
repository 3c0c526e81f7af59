# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter awx_rrule: the iCalendar rule of an AWX schedule that fires at a local wall-clock time.

Why not awx.awx's ``schedule_rrule`` lookup (awx.awx 24.6.1, compared with pytz 2026.6): for the rules
awx_configure.yml sends it builds the same schedule (daily: the identical string; weekly: the same fields,
``BYDAY`` before ``INTERVAL``), but as an input check for a playbook that changes a production controller it
falls short, and it is the checks that this filter is for:
- it needs pytz, which neither the controller's requirements nor this collection otherwise need (the
  standard library's zoneinfo knows the same IANA names);
- an omitted ``timezone`` silently means America/New_York, and an omitted ``start_date`` means now, so the
  rule, and with it the schedule, changes on every run (awx_configure.yml must change nothing the second time);
- a misspelt timezone fails as "Timezone parameter is not valid", without the name or a suggestion; the time
  of day exists only inside ``start_date`` (``YYYY-MM-DD HH:MM:SS``; ``20:00`` without seconds is refused);
  weekdays are only full lower-case English names (no ``MO``, ``Mon``, ``weekdays``, ``weekend``).
The expansion itself is AWX's: tests/awx/test_rrule.py expands these rules with python-dateutil, as AWX
does, across daylight-saving changes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: awx_rrule
version_added: 0.1.0
short_description: iCalendar rule of an AWX / Automation Controller schedule at a local time
description:
  - Returns the C(rrule) string of an AWX schedule (module P(awx.awx.schedule#module)) that fires at a wall-clock time
    in an IANA timezone, every day or on the given weekdays.
  - The rule starts with C(DTSTART;TZID=<timezone>:...), so AWX (which expands schedules with python-dateutil) keeps
    the local time across daylight-saving changes; the UTC time of the run moves instead.
  - A time in the hour that a spring daylight-saving change skips runs one hour later on that day; a time that occurs
    twice in autumn runs once, at its first occurrence.
  - Every input is validated; a bad one fails with the reason, before anything is sent to the controller.
positional: timezone, weekdays, start_date
options:
  _input:
    description:
      - Local time of day, C(HH:MM) on a 24-hour clock, for example V(08:00) or V(20:00).
      - Quote it in YAML; unquoted, C(20:00) is read as the base-60 integer 1200, which is refused.
    type: str
    required: true
  timezone:
    description: IANA timezone name known to the Python C(zoneinfo) database, for example V(Europe/Berlin) or V(UTC).
    type: str
    required: true
  weekdays:
    description:
      - Days the schedule fires on, as two-letter iCalendar codes (V(MO) to V(SU)), English day names or their
        three-letter abbreviations (case-insensitive), as a list or a comma-separated string.
      - V(weekdays) stands for Monday to Friday, V(weekend) for Saturday and Sunday.
      - Empty or omitted, or all seven days, means every day.
    type: list
    elements: str
    default: []
  start_date:
    description:
      - Date of C(DTSTART), C(YYYY-MM-DD). The schedule fires from then on; keep it fixed (and in the past) so that
        the rule, and with it the schedule, stays the same from one run to the next.
    type: str
    default: '2025-01-01'
author:
  - gpufleet.mig developers (@gpufleet)
'''

EXAMPLES = r'''
- name: Switch the fleet to the training layout at 20:00 Berlin time, every day
  awx.awx.schedule:
    name: MIG layout - nighttime - schedule
    unified_job_template: MIG layout - nighttime
    rrule: "{{ '20:00' | gpufleet.mig.awx_rrule('Europe/Berlin') }}"
    # DTSTART;TZID=Europe/Berlin:20250101T200000 RRULE:FREQ=DAILY;INTERVAL=1

- name: Weekdays only
  ansible.builtin.debug:
    msg: "{{ '08:00' | gpufleet.mig.awx_rrule('America/New_York', weekdays=['mon', 'tue', 'wed', 'thu', 'fri']) }}"
    # DTSTART;TZID=America/New_York:20250101T080000 RRULE:FREQ=WEEKLY;INTERVAL=1;BYDAY=MO,TU,WE,TH,FR
'''

RETURN = r'''
_value:
  description:
    - C(DTSTART;TZID=<timezone>:<start_date>T<HHMM>00 RRULE:FREQ=DAILY;INTERVAL=1), or with weekdays
      C(RRULE:FREQ=WEEKLY;INTERVAL=1;BYDAY=<days>) (days in Monday-first order).
  type: str
  sample: DTSTART;TZID=Europe/Berlin:20250101T080000 RRULE:FREQ=DAILY;INTERVAL=1
'''

import datetime
import difflib
import re

try:
    import zoneinfo
except ImportError:  # Python < 3.9: the filter reports it when used
    zoneinfo = None

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.six import string_types

DAY_CODES = ('MO', 'TU', 'WE', 'TH', 'FR', 'SA', 'SU')
_DAY_NAMES = ('monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday', 'sunday')
_DAY_ALIASES = {alias: code for code, name in zip(DAY_CODES, _DAY_NAMES) for alias in (code.lower(), name, name[:3])}
_DAY_GROUPS = {'weekdays': DAY_CODES[:5], 'weekend': DAY_CODES[5:]}
_TIME_RE = re.compile(r'^(?P<hour>[01][0-9]|2[0-3]):(?P<minute>[0-5][0-9])$')
_DATE_RE = re.compile(r'^[0-9]{4}-[0-9]{2}-[0-9]{2}$')


def _error(message):
    return AnsibleFilterError('awx_rrule: %s' % message)


def _parse_time(value):
    if isinstance(value, bool) or not isinstance(value, (string_types, int)):
        raise _error('the time must be a string HH:MM (24-hour clock), got %s %r' % (type(value).__name__, value))
    if isinstance(value, int):
        hint = ''
        if 0 <= value < 24 * 60:
            hint = (" (YAML reads an unquoted %02d:%02d as the base-60 number %d: quote it, '%02d:%02d')"
                    % (value // 60, value % 60, value, value // 60, value % 60))
        raise _error('the time must be a string HH:MM (24-hour clock), got the integer %d%s' % (value, hint))
    match = _TIME_RE.match(to_text(value).strip())
    if not match:
        raise _error("the time must be HH:MM on a 24-hour clock, such as '08:00' or '20:00', got %r" % (value,))
    return int(match.group('hour')), int(match.group('minute'))


def _parse_timezone(value):
    if not isinstance(value, string_types) or not value.strip():
        raise _error('the timezone must be an IANA name such as Europe/Berlin or UTC, got %r' % (value,))
    if zoneinfo is None:
        raise _error('the timezone check needs Python 3.9 or later (module zoneinfo) on the controller')
    name = to_text(value).strip()
    known = zoneinfo.available_timezones()
    if name not in known:
        close = difflib.get_close_matches(name, sorted(known), n=3)
        raise _error('unknown timezone %r: use an IANA name such as Europe/Berlin, America/New_York or UTC%s'
                     % (name, ' (did you mean %s?)' % ', '.join(close) if close else ''))
    return name


def _parse_weekdays(value):
    if value is None:
        return []
    if isinstance(value, string_types):
        items = [item for item in to_text(value).split(',') if item.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise _error('weekdays must be a list of days (or a comma-separated string), got %s %r'
                     % (type(value).__name__, value))
    days = set()
    for item in items:
        if not isinstance(item, string_types):
            raise _error('unknown weekday %r: use MO, TU, WE, TH, FR, SA, SU, day names, weekdays or weekend' % (item,))
        key = to_text(item).strip().lower()
        if key in _DAY_GROUPS:
            days.update(_DAY_GROUPS[key])
        elif key in _DAY_ALIASES:
            days.add(_DAY_ALIASES[key])
        else:
            raise _error('unknown weekday %r: use MO, TU, WE, TH, FR, SA, SU, day names, weekdays or weekend' % (item,))
    return [code for code in DAY_CODES if code in days]


def _parse_start_date(value):
    text = to_text(value).strip() if isinstance(value, (string_types, datetime.date)) else None
    if text is None or not _DATE_RE.match(text):
        raise _error('start_date must be a date YYYY-MM-DD, got %r' % (value,))
    try:
        return datetime.datetime.strptime(text, '%Y-%m-%d').date()
    except ValueError as exc:
        raise _error('start_date %r is not a valid date: %s' % (text, exc))


def awx_rrule(time, timezone, weekdays=None, start_date='2025-01-01'):
    """AWX schedule rule firing at ``time`` (HH:MM) local time in ``timezone``, daily or on ``weekdays``."""
    hour, minute = _parse_time(time)
    zone = _parse_timezone(timezone)
    days = _parse_weekdays(weekdays)
    start = _parse_start_date(start_date)
    if days and len(days) < len(DAY_CODES):
        rule = 'FREQ=WEEKLY;INTERVAL=1;BYDAY=%s' % ','.join(days)
    else:
        rule = 'FREQ=DAILY;INTERVAL=1'
    return 'DTSTART;TZID=%s:%sT%02d%02d00 RRULE:%s' % (zone, start.strftime('%Y%m%d'), hour, minute, rule)


class FilterModule(object):
    """gpufleet.mig AWX filters."""

    def filters(self):
        return {'awx_rrule': awx_rrule}

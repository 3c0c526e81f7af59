# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s/_api_watch: what the API server's answers to the event source's list and watch mean (backoff, Retry-After,
refusals, expired versions, watch lines)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._api_watch import (
    RETRY_AFTER_MAX, ApiRefusal, Expired, OversizedLine, Retry, WatchLines, refusal, retry_after_seconds, watch_error)
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.pods import pod


# ---- failures and when to try again -------------------------------------------------------------------------

def test_backoff_doubles_to_the_cap_and_starts_over_after_two_quiet_minutes():
    retry = Retry(retry_max=30)
    assert [retry.delay(now) for now in (0, 1, 3, 7, 15, 31, 61)] == [1, 2, 4, 8, 16, 30, 30]
    # 119 s after the last retry began: still failing, still at the cap; 120 s: a fresh start.
    assert retry.delay(61 + 30 + 119) == 30
    assert retry.delay(210 + 30 + 120) == 1


def test_backoff_never_shorter_than_retry_after_and_retry_after_capped():
    retry = Retry(retry_max=30)
    assert retry.delay(0, retry_after=7) == 7
    assert retry.delay(10, retry_after=0) == 2
    assert retry.delay(20, retry_after=86400) == RETRY_AFTER_MAX


def test_a_small_retry_max_is_also_the_first_wait():
    assert Retry(retry_max=0.05).delay(0) == 0.05


def test_retry_after_in_seconds_or_as_an_http_date():
    assert retry_after_seconds('3', 0) == 3
    assert retry_after_seconds(' 0 ', 0) == 0
    assert retry_after_seconds('Wed, 21 Oct 2015 07:28:10 GMT', 1445412480) == 10
    assert retry_after_seconds('Wed, 21 Oct 2015 07:28:00 GMT', 1445412490) == 0
    for unreadable in (None, '', 'soon', '-1', '1.5'):
        assert retry_after_seconds(unreadable, 0) is None


@pytest.mark.parametrize('status, words', [
    (401, 'refused the credentials (HTTP 401 Unauthorized on /api/v1/pods): the token or certificate expired or was revoked'),
    (403, 'refused access (HTTP 403 Forbidden on /api/v1/pods): the account needs get, list and watch on pods'),
    (429, 'throttling (HTTP 429 Too Many Requests on /api/v1/pods)'),
    (500, 'failed (HTTP 500 on /api/v1/pods)'),
    (503, 'failed (HTTP 503 on /api/v1/pods)'),
    (404, 'answered HTTP 404 to /api/v1/pods'),
])
def test_every_answer_but_410_is_a_refusal_to_retry_with_its_status_and_retry_after(status, words):
    refused = refusal(status, '/api/v1/pods', retry_after=4)
    assert isinstance(refused, ApiRefusal) and words in str(refused)
    assert (refused.status, refused.retry_after) == (status, 4)


def test_410_and_a_watch_error_410_mean_list_again():
    with pytest.raises(Expired):
        refusal(410, '/api/v1/pods')
    with pytest.raises(Expired):
        watch_error({'code': 410, 'reason': 'Expired'})


def test_a_watch_error_other_than_410_is_a_refusal_naming_code_reason_and_message():
    refused = watch_error({'code': 500, 'reason': 'InternalError', 'message': 'etcdserver: request timed out'})
    assert refused.status == 500
    assert str(refused) == ('the watch ended with an error from the API server (code 500, InternalError): '
                            'etcdserver: request timed out')
    assert watch_error({}).status == 0


def test_watch_lines_are_cut_across_chunks_and_blank_lines_skipped():
    lines = WatchLines(max_bytes=100)
    assert lines.feed(b'{"a":') == []
    assert lines.feed(b'1}\n\n{"b"') == [b'{"a":1}']
    assert lines.feed(b':2}\n{"c":3}\n') == [b'{"b":2}', b'{"c":3}']
    assert bytes(lines.partial) == b''


def test_a_line_over_the_limit_is_refused_whether_finished_or_not_and_the_reader_starts_clean():
    lines = WatchLines(max_bytes=10)
    with pytest.raises(OversizedLine, match='11 bytes, over the 10'):
        lines.feed(b'x' * 11 + b'\n')
    assert lines.feed(b'{"ok":1}\n') == [b'{"ok":1}']
    with pytest.raises(OversizedLine, match='more than 11 bytes'):
        lines.feed(b'y' * 11)
    assert lines.feed(b'{"ok":2}\n') == [b'{"ok":2}']
    assert WatchLines(max_bytes=10).feed(b'x' * 10 + b'\n') == [b'x' * 10]


def test_the_default_line_limit_reads_a_pod_over_aiohttps_512_kib():
    line = json.dumps({'type': 'ADDED', 'object': pod('big')}).encode()[:-1] + b', "pad": "%s"}' % (b'x' * 600 * 1024)
    assert WatchLines().feed(line + b'\n') == [line]

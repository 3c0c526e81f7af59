# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""What the API server's answers to a list or a watch mean for the event source gpufleet.mig.mig_pending_pods: a
refusal to retry after a backoff (and how long), an expired resourceVersion to list again at once, and a watch
stream cut into its lines. The source does the I/O; these decide.

Pure Python, no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import email.utils

# One watch line is one object and its envelope. The API server refuses request bodies over 3 MiB
# (k8s.io/apiserver pkg/server/config.go, MaxRequestBodyBytes) and etcd values over 1.5 MiB by default
# (--max-request-bytes), so no pod is near 8 MiB; aiohttp's own line limit is 512 KiB (twice its 256 KiB read
# buffer), which a pod with large annotations passes.
MAX_LINE_BYTES = 8 * 1024 * 1024
# The longest Retry-After honoured: a server's answer never stalls the source longer than this.
RETRY_AFTER_MAX = 600.0


class Expired(Exception):
    """The resourceVersion is too old (HTTP 410 Gone, or a watch ERROR with code 410): list again at once."""


class ApiRefusal(Exception):
    """An answer of the API server to try again after a backoff: ``status``, ``retry_after`` (seconds or None),
    and the one-line message (no secret in it)."""

    def __init__(self, status, message, retry_after=None):
        super(ApiRefusal, self).__init__(message)
        self.status = status
        self.retry_after = retry_after


class OversizedLine(Exception):
    """A watch line longer than MAX_LINE_BYTES: the event is lost, so the source lists again."""


def retry_after_seconds(value, now_epoch):
    """Seconds a Retry-After header asks to wait (RFC 9110 10.2.3: delay-seconds or an HTTP-date), None when absent
    or unreadable. The API server's priority and fairness sends seconds with its 429 (k8s.io/apiserver
    pkg/server/filters/priority-and-fairness.go)."""
    text = (value or '').strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now_epoch)


def refusal(status, path, retry_after=None):
    """What an HTTP answer other than 200 means: Expired for 410, else an ApiRefusal whose message says what
    the operator can do."""
    if status == 410:
        raise Expired()
    if status == 401:
        message = ('the API server refused the credentials (HTTP 401 Unauthorized on %s): the token or certificate '
                   'expired or was revoked; reloading the kubeconfig and trying again' % path)
    elif status == 403:
        message = ('the API server refused access (HTTP 403 Forbidden on %s): the account needs get, list and watch '
                   'on pods; trying again' % path)
    elif status == 429:
        message = 'the API server is throttling (HTTP 429 Too Many Requests on %s)' % path
    elif status >= 500:
        message = 'the API server failed (HTTP %d on %s)' % (status, path)
    else:
        message = 'the API server answered HTTP %d to %s' % (status, path)
    return ApiRefusal(status, message, retry_after)


def watch_error(status):
    """What a watch ERROR event means (its object is a Status): Expired for code 410, else an ApiRefusal."""
    code = status.get('code') or 0
    if code == 410:
        raise Expired()
    return ApiRefusal(code, 'the watch ended with an error from the API server (code %s, %s): %s' % (
        code, status.get('reason') or 'no reason', status.get('message') or 'no message'))


class Retry(object):
    """How long to wait before the next list after a failure. client-go's reflector backs off between its
    ListAndWatch attempts, doubling from 800 ms to 30 s and starting over after 2 minutes without a failure
    (tools/cache/reflector.go, NewReflectorWithOptions: wait.NewExponentialBackoffManager); here from 1 s
    doubling to ``retry_max``, starting over once ``reset_after`` seconds passed without a failure, and never
    shorter than the server's Retry-After (capped at RETRY_AFTER_MAX). No jitter: one source per cluster."""

    def __init__(self, retry_max, first=1.0, reset_after=120.0):
        self.retry_max = float(retry_max)
        self.first = min(float(first), self.retry_max)
        self.reset_after = float(reset_after)
        self.failures = 0
        self.retrying_since = None

    def delay(self, now, retry_after=None):
        """Seconds to wait after a failure at ``now`` (a monotonic clock)."""
        if self.retrying_since is not None and now - self.retrying_since >= self.reset_after:
            self.failures = 0
        self.failures += 1
        wait = min(self.retry_max, self.first * 2 ** (self.failures - 1))
        if retry_after is not None:
            wait = max(wait, min(float(retry_after), RETRY_AFTER_MAX))
        self.retrying_since = now + wait
        return wait


class WatchLines(object):
    """A watch stream's bytes cut into its lines (one JSON object each), none longer than ``max_bytes``."""

    def __init__(self, max_bytes=None):
        self.max_bytes = max_bytes or MAX_LINE_BYTES
        self.partial = bytearray()

    def feed(self, data):
        """The complete, non-blank lines ``data`` ends; OversizedLine when the unfinished one is over the limit."""
        self.partial.extend(data)
        lines = []
        start = 0
        while True:
            end = self.partial.find(b'\n', start)
            if end < 0:
                break
            if end - start > self.max_bytes:
                self.partial = bytearray()
                raise OversizedLine('a watch line of %d bytes, over the %d the source reads' % (end - start, self.max_bytes))
            line = bytes(self.partial[start:end]).strip()
            if line:
                lines.append(line)
            start = end + 1
        del self.partial[:start]
        if len(self.partial) > self.max_bytes:
            size = len(self.partial)
            self.partial = bytearray()
            raise OversizedLine('a watch line of more than %d bytes, over the %d the source reads' % (size, self.max_bytes))
        return lines

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small fake of the Kubernetes API server's pod list and watch, for the event source under ansible-rulebook.

What it answers, as the real API server does (Kubernetes docs "API Concepts": "Efficient detection of
changes", "Watch bookmarks", "Resource versions"; API reference Pod v1 "list"/"watch"):
- GET /api/v1/pods[?fieldSelector=status.phase=Pending]: a PodList whose metadata.resourceVersion is the
  version to watch from;
- the same with watch=1&resourceVersion=N: HTTP/1.1 chunked, one JSON object per line
  {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...} for every change after N, open until
  timeoutSeconds; a pod that stops matching the field selector comes as DELETED (the apiserver's
  cacher); a version older than the last compaction is an ERROR event whose object is a Status with
  code 410 ("too old resource version"), after which the client must list again;
- without "Authorization: Bearer <token>": 401 with a Status.
The test drives it: ``put`` pods (added or changed), ``compact`` (expire every version so far), and reads
``requests`` (each query) and ``paths``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


def _status(code, reason, message):
    return {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
            'message': message, 'reason': reason, 'code': code}


class FakeKubeAPI(object):
    def __init__(self, token):
        self.token = token
        self.version = 100
        self.compacted = 0
        self.epoch = 0            # compactions so far: a watch opened before one ends with 410
        self.pods = {}            # key -> pod (latest)
        self.changes = []         # (version, type, pod before, pod after)
        self.requests = []        # the query of every request
        self.paths = []           # and its path
        self.cond = threading.Condition()
        self.server = ThreadingHTTPServer(('127.0.0.1', 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self):
        return 'http://127.0.0.1:%d' % self.server.server_address[1]

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        with self.cond:
            self.epoch += 1  # ends open watches
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # ---- driven by the test ----
    def put(self, pod):
        """Create or replace a pod (ADDED or MODIFIED)."""
        with self.cond:
            self.version += 1
            pod = copy.deepcopy(pod)
            pod['metadata']['resourceVersion'] = str(self.version)
            key = (pod['metadata']['namespace'], pod['metadata']['name'])
            before = self.pods.get(key)
            self.pods[key] = pod
            self.changes.append((self.version, before, pod))
            self.cond.notify_all()

    def compact(self):
        """Every version so far is too old: open watches end with 410, later ones from them get 410."""
        with self.cond:
            self.compacted = self.version
            self.epoch += 1
            self.cond.notify_all()

    # ---- the API ----
    @staticmethod
    def _matches(pod, selector):
        if not pod:
            return False
        for term in filter(None, (selector or '').split(',')):
            field, dummy, value = term.partition('=')
            if field == 'status.phase' and pod.get('status', {}).get('phase') != value:
                return False
        return True

    def _list(self, selector):
        with self.cond:
            items = [pod for key, pod in sorted(self.pods.items()) if self._matches(pod, selector)]
            return {'kind': 'PodList', 'apiVersion': 'v1', 'metadata': {'resourceVersion': str(self.version)},
                    'items': items}

    def _events_after(self, since, selector):
        out = []
        for version, before, after in self.changes:
            if version <= since:
                continue
            was, now = self._matches(before, selector), self._matches(after, selector)
            if now:
                out.append({'type': 'MODIFIED' if was else 'ADDED', 'object': after})
            elif was:
                out.append({'type': 'DELETED', 'object': after})
        return out

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def log_message(self, *args):
                pass

            def _send_json(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, obj):
                data = (json.dumps(obj) + '\n').encode()
                self.wfile.write(b'%x\r\n%s\r\n' % (len(data), data))
                self.wfile.flush()

            def do_GET(self):
                parsed = urlparse(self.path)
                query = dict((k, v[0]) for k, v in parse_qs(parsed.query).items())
                api.requests.append(query)
                api.paths.append(parsed.path)
                if self.headers.get('Authorization') != 'Bearer ' + api.token:
                    return self._send_json(401, _status(401, 'Unauthorized', 'Unauthorized'))
                if parsed.path != '/api/v1/pods':
                    return self._send_json(404, _status(404, 'NotFound', 'the server could not find the requested resource'))
                selector = query.get('fieldSelector')
                if query.get('watch') not in ('1', 'true'):
                    return self._send_json(200, api._list(selector))
                self._watch(int(query.get('resourceVersion') or 0), selector, float(query.get('timeoutSeconds') or 60))

            def _watch(self, since, selector, timeout):
                self.send_response(200)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Transfer-Encoding', 'chunked')
                self.end_headers()
                deadline = time.monotonic() + timeout
                epoch = api.epoch
                try:
                    while True:
                        with api.cond:
                            if since < api.compacted or epoch != api.epoch:
                                events = [{'type': 'ERROR', 'object': _status(
                                    410, 'Expired', 'too old resource version: %d (%d)' % (since, api.compacted))}]
                            else:
                                events = api._events_after(since, selector)
                                since = api.version
                                if not events:
                                    left = deadline - time.monotonic()
                                    if left <= 0:
                                        break
                                    api.cond.wait(min(left, 0.5))
                                    continue
                        for event in events:
                            self._chunk(event)
                        if events[0]['type'] == 'ERROR':
                            break
                    self.wfile.write(b'0\r\n\r\n')
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler

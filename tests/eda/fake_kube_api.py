# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small fake of the Kubernetes API server's pod list and watch, for the event source under ansible-rulebook
(tests/eda) and in its unit tests, with the faults a real one shows injected on demand.

What it answers, as the real API server does (Kubernetes docs "API Concepts": "Efficient detection of
changes", "Watch bookmarks", "Resource versions", "Retrieving large results sets in chunks"; API reference
Pod v1 "list"/"watch"):
- GET /api/v1/pods[?fieldSelector=...]: a PodList whose metadata.resourceVersion is the version to watch
  from; with ``limit`` a page of that many pods and metadata.continue naming the next page; the field
  selector's terms are ``status.phase=X`` and ``status.phase!=X``, joined by commas;
- the same with watch=1&resourceVersion=N: HTTP/1.1 chunked, one JSON object per line
  {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...} for every change after N, open until
  timeoutSeconds; a pod that stops matching the field selector comes as DELETED (the apiserver's
  cacher), and so does a deleted pod (its last state); a version older than the last compaction is an
  ERROR event whose object is a Status with code 410 ("too old resource version"), after which the client
  must list again;
- without "Authorization: Bearer <token>": 401 with a Status.
The test drives it: ``put`` pods (added or changed), ``delete`` them, ``compact`` (expire every version so
far), and injects faults: ``fail_next`` (the next requests answered with an HTTP status, e.g. 429 with
Retry-After, 503, 401), ``watch_error`` (open watches end with an ERROR event of a code other than 410),
``drop_watches`` (open watches lose their connection mid-stream); it reads ``requests`` (each query),
``paths`` and ``answers`` (each request's status).
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


REASONS = {401: 'Unauthorized', 403: 'Forbidden', 429: 'TooManyRequests', 500: 'InternalError', 503: 'ServiceUnavailable'}


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A client that drops a connection (the source after a line too long) is what the test injects: no trace.
        import sys
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            ThreadingHTTPServer.handle_error(self, request, client_address)


class FakeKubeAPI(object):
    def __init__(self, token):
        self.token = token
        self.version = 100
        self.compacted = 0
        self.epoch = 0            # compactions so far: a watch opened before one ends with 410
        self.pods = {}            # key -> pod (latest)
        self.nodes = {}           # name -> Node: listed as they are; a watch of the Nodes tells nothing
        self.changes = []         # (version, pod before, pod after or None when deleted)
        self.requests = []        # the query of every request
        self.paths = []           # and its path
        self.answers = []         # and the status it got
        self.patches = []         # (path, Content-Type, body) of every PATCH
        self.failures = []        # (status, headers) for the next requests, in order
        self.watch_faults = []    # what open watches do next: ('error', Status) or ('drop', None)
        self.cond = threading.Condition()
        self.server = _QuietServer(('127.0.0.1', 0), self._handler())
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
    def put_node(self, node):
        """A Node the next list of the Nodes returns."""
        with self.cond:
            self.version += 1
            self.nodes[node['metadata']['name']] = copy.deepcopy(node)

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

    def delete(self, namespace, name):
        """Delete a pod (DELETED with its last state)."""
        with self.cond:
            self.version += 1
            before = self.pods.pop((namespace, name))
            self.changes.append((self.version, before, None))
            self.cond.notify_all()

    def compact(self):
        """Every version so far is too old: open watches end with 410, later ones from them get 410."""
        with self.cond:
            self.compacted = self.version
            self.epoch += 1
            self.cond.notify_all()

    def fail_next(self, count, status, headers=None):
        """The next ``count`` requests (list or watch) are answered with ``status`` and a Status body."""
        with self.cond:
            self.failures.extend([(status, dict(headers or {}))] * count)

    def watch_error(self, code, reason, message):
        """The open watch (or the next one) ends with an ERROR event whose Status has ``code``."""
        with self.cond:
            self.watch_faults.append(('error', _status(code, reason, message)))
            self.cond.notify_all()

    def drop_watches(self):
        """The open watch (or the next one) loses its connection: no last chunk, the socket closed."""
        with self.cond:
            self.watch_faults.append(('drop', None))
            self.cond.notify_all()

    def count(self, watch=None, status=None):
        """How many requests were watches (``watch`` True) or lists (False), with that answer."""
        return sum(1 for query, answer in zip(list(self.requests), list(self.answers))
                   if (watch is None or bool(query.get('watch')) == watch) and (status is None or answer == status))

    # ---- the API ----
    @staticmethod
    def _matches(pod, selector):
        if not pod:
            return False
        phase = pod.get('status', {}).get('phase')
        for term in filter(None, (selector or '').split(',')):
            if '!=' in term:
                field, value, equal = term.partition('!=')[0], term.partition('!=')[2], False
            else:
                field, value, equal = term.partition('=')[0], term.partition('=')[2], True
            if field == 'status.phase' and (phase == value) != equal:
                return False
        return True

    def _list(self, selector, limit, token):
        with self.cond:
            items = [pod for key, pod in sorted(self.pods.items()) if self._matches(pod, selector)]
            start = int(token or 0)
            end = start + limit if limit else len(items)
            metadata = {'resourceVersion': str(self.version)}
            if end < len(items):
                metadata['continue'] = str(end)
            return {'kind': 'PodList', 'apiVersion': 'v1', 'metadata': metadata, 'items': items[start:end]}

    def _events_after(self, since, selector):
        out = []
        for version, before, after in self.changes:
            if version <= since:
                continue
            was, now = self._matches(before, selector), self._matches(after, selector)
            if now:
                out.append({'type': 'MODIFIED' if was else 'ADDED', 'object': after})
            elif was:
                out.append({'type': 'DELETED', 'object': after or before})
        return out

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def log_message(self, *args):
                pass

            def _send_json(self, code, body, headers=None):
                api.answers.append(code)
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
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
                with api.cond:
                    status, headers = api.failures.pop(0) if api.failures else (None, None)
                if status:
                    return self._send_json(status, _status(status, REASONS.get(status, 'Failure'), 'injected'), headers)
                if self.headers.get('Authorization') != 'Bearer ' + api.token:
                    return self._send_json(401, _status(401, 'Unauthorized', 'Unauthorized'))
                if parsed.path == '/api/v1/nodes':
                    return self._nodes(query.get('watch') in ('1', 'true'), float(query.get('timeoutSeconds') or 60))
                if parsed.path != '/api/v1/pods':
                    return self._send_json(404, _status(404, 'NotFound', 'the server could not find the requested resource'))
                selector = query.get('fieldSelector')
                if query.get('watch') not in ('1', 'true'):
                    return self._send_json(200, api._list(selector, int(query.get('limit') or 0), query.get('continue')))
                self._watch(int(query.get('resourceVersion') or 0), selector, float(query.get('timeoutSeconds') or 60))

            def do_PATCH(self):
                """A pod's strategic merge patch, as far as the source sends one: schedulingGates entries with
                ``$patch: delete`` remove that gate by name (the list merges by name), spec.affinity is replaced,
                metadata.annotations merged."""
                body = json.loads(self.rfile.read(int(self.headers.get('Content-Length') or 0)) or b'{}')
                api.paths.append(self.path)
                api.patches.append((self.path, self.headers.get('Content-Type'), body))
                if self.headers.get('Authorization') != 'Bearer ' + api.token:
                    return self._send_json(401, _status(401, 'Unauthorized', 'Unauthorized'))
                parts = self.path.split('/')
                key = (parts[4], parts[6]) if len(parts) == 7 and parts[5] == 'pods' else None
                if key not in api.pods:
                    return self._send_json(404, _status(404, 'NotFound', 'pods "%s" not found' % parts[-1]))
                pod = copy.deepcopy(api.pods[key])
                spec, change = pod['spec'], body.get('spec') or {}
                deleted = [g['name'] for g in change.get('schedulingGates') or [] if g.get('$patch') == 'delete']
                spec['schedulingGates'] = [g for g in spec.get('schedulingGates') or [] if g['name'] not in deleted]
                if not spec['schedulingGates']:
                    del spec['schedulingGates']
                if 'affinity' in change:
                    spec['affinity'] = change['affinity']
                annotations = (body.get('metadata') or {}).get('annotations')
                if annotations:
                    pod['metadata'].setdefault('annotations', {}).update(annotations)
                api.put(pod)
                return self._send_json(200, api.pods[key])

            def _nodes(self, watch, timeout):
                with api.cond:
                    items, version = [api.nodes[n] for n in sorted(api.nodes)], str(api.version)
                if not watch:
                    return self._send_json(200, {'kind': 'NodeList', 'items': items, 'metadata': {'resourceVersion': version}})
                api.answers.append(200)
                self.send_response(200)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Transfer-Encoding', 'chunked')
                self.end_headers()
                time.sleep(min(timeout, 2.0))
                try:
                    self.wfile.write(b'0\r\n\r\n')
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _watch(self, since, selector, timeout):
                api.answers.append(200)
                self.send_response(200)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Transfer-Encoding', 'chunked')
                self.end_headers()
                deadline = time.monotonic() + timeout
                epoch = api.epoch
                try:
                    while True:
                        with api.cond:
                            fault = api.watch_faults.pop(0) if api.watch_faults else None
                            if fault is None and (since < api.compacted or epoch != api.epoch):
                                fault = ('error', _status(410, 'Expired', 'too old resource version: %d (%d)' % (since, api.compacted)))
                            if fault is None:
                                events = api._events_after(since, selector)
                                since = api.version
                                if not events:
                                    left = deadline - time.monotonic()
                                    if left <= 0:
                                        break
                                    api.cond.wait(min(left, 0.5))
                                    continue
                        if fault is not None and fault[0] == 'drop':
                            self.close_connection = True
                            return
                        if fault is not None:
                            self._chunk({'type': 'ERROR', 'object': fault[1]})
                            break
                        for event in events:
                            self._chunk(event)
                    self.wfile.write(b'0\r\n\r\n')
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler

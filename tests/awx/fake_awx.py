# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small in-process fake of the AWX API v2, enough for the awx.awx modules of playbooks/awx_configure.yml.

Objects live in dicts. Lists filter on exact field values (``?name=...&organization=3``, and AWX's
``or__`` lookups), objects are created with POST and changed with PATCH, related lists
(``/job_templates/7/credentials/``) are (dis)associated with POST ``{"id": n[, "disassociate": true]}``.
Foreign keys must name existing objects and schedules must carry an rrule that AWX would accept
(expanded with dateutil, as AWX does): a bad request answers 400 as AWX would. Every request is
logged in ``requests`` (method, path) so that a test can tell whether a run changed anything.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from dateutil import rrule as dateutil_rrule

API = '/api/v2/'
PRODUCT = ('AWX', '24.6.1')

# Collection -> (type, foreign keys -> collection, related lists that can be associated).
COLLECTIONS = {
    'organizations': ('organization', {'default_environment': 'execution_environments'},
                      ('instance_groups', 'galaxy_credentials')),
    'credentials': ('credential', {'organization': 'organizations'}, ()),
    'execution_environments': ('execution_environment', {'organization': 'organizations', 'credential': 'credentials'}, ()),
    'projects': ('project', {'organization': 'organizations', 'credential': 'credentials',
                             'default_environment': 'execution_environments'}, ()),
    'inventories': ('inventory', {'organization': 'organizations'}, ('instance_groups',)),
    'inventory_sources': ('inventory_source', {'inventory': 'inventories', 'source_project': 'projects',
                                               'credential': 'credentials',
                                               'execution_environment': 'execution_environments'}, ()),
    'job_templates': ('job_template', {'organization': 'organizations', 'project': 'projects',
                                       'inventory': 'inventories', 'execution_environment': 'execution_environments'},
                      ('credentials', 'labels', 'instance_groups')),
    'schedules': ('schedule', {'unified_job_template': 'unified_job_templates', 'inventory': 'inventories'},
                  ('credentials',)),
    'workflow_job_templates': ('workflow_job_template', {'organization': 'organizations', 'inventory': 'inventories'},
                               ('labels',)),
    'workflow_job_template_nodes': ('workflow_job_template_node', {'workflow_job_template': 'workflow_job_templates',
                                                                   'unified_job_template': 'unified_job_templates',
                                                                   'inventory': 'inventories'},
                                    ('success_nodes', 'failure_nodes', 'always_nodes', 'credentials', 'labels',
                                     'instance_groups')),
    'instance_groups': ('instance_group', {}, ()),
    'labels': ('label', {'organization': 'organizations'}, ()),
}
# What AWX's unified_job_templates list shows.
UNIFIED = ('job_templates', 'projects', 'inventory_sources', 'workflow_job_templates')
# Related lists whose members are objects of another collection.
RELATED_TARGETS = {'galaxy_credentials': 'credentials', 'success_nodes': 'workflow_job_template_nodes',
                   'failure_nodes': 'workflow_job_template_nodes', 'always_nodes': 'workflow_job_template_nodes'}
REQUIRED = {
    'projects': ('name', 'organization'),
    'inventories': ('name', 'organization'),
    'inventory_sources': ('name', 'inventory', 'source'),
    'job_templates': ('name', 'project', 'playbook'),
    'schedules': ('name', 'unified_job_template', 'rrule'),
    'execution_environments': ('name', 'image'),
    'workflow_job_template_nodes': ('workflow_job_template',),
}
_DTSTART = re.compile(r'^DTSTART;TZID=[A-Za-z0-9_+/-]+:[0-9]{8}T[0-9]{6} RRULE:(?P<rule>[A-Z0-9=;,]+)$')


class BadRequest(Exception):
    """A 400 answer with AWX's field -> messages body."""

    def __init__(self, errors):
        super(BadRequest, self).__init__(errors)
        self.errors = errors


def validate_rrule(value):
    """AWX's checks of a schedule's rrule (DTSTART with TZID, INTERVAL), then a dateutil expansion."""
    match = _DTSTART.match(value or '')
    if not match:
        raise BadRequest({'rrule': ['Valid DTSTART;TZID=...:YYYYMMDDTHHMMSS and RRULE required, got %r' % value]})
    if 'INTERVAL=' not in match.group('rule'):
        raise BadRequest({'rrule': ['INTERVAL required in rrule.']})
    try:
        rules = dateutil_rrule.rrulestr(value, forceset=True)
        first = next(iter(rules))
    except (ValueError, StopIteration) as exc:
        raise BadRequest({'rrule': ['rrule cannot be expanded: %s' % exc]})
    if first.tzinfo is None:
        raise BadRequest({'rrule': ['unknown TZID in %r' % value]})


class FakeAWX(object):
    """State of the fake controller and its HTTP server (``start()`` / ``stop()``)."""

    def __init__(self, token):
        self.token = token
        self.objects = dict((name, {}) for name in COLLECTIONS)
        self.associations = {}   # (collection, id, related) -> [ids]
        self.requests = []
        self.next_id = 1
        self.lock = threading.Lock()
        self.server = None
        self.thread = None

    # ---- state --------------------------------------------------------------------------
    def add(self, collection, **fields):
        """Create an object directly (fixtures: organizations, credentials that must pre-exist)."""
        with self.lock:
            return self._create(collection, fields)

    def find(self, collection, **fields):
        return [obj for obj in self._list(collection) if all(obj.get(k) == v for k, v in fields.items())]

    def one(self, collection, **fields):
        found = self.find(collection, **fields)
        assert len(found) == 1, 'expected one %s with %r, found %r' % (collection, fields, found)
        return found[0]

    def related(self, collection, obj_id, name):
        return list(self.associations.get((collection, obj_id, name), []))

    def changes(self):
        return [(method, path) for method, path in self.requests if method not in ('GET', 'HEAD')]

    def _list(self, collection):
        if collection == 'unified_job_templates':
            return [obj for name in UNIFIED for obj in self.objects[name].values()]
        return list(self.objects[collection].values())

    def _get(self, collection, obj_id):
        if collection == 'unified_job_templates':
            for name in UNIFIED:
                if obj_id in self.objects[name]:
                    return self.objects[name][obj_id]
            return None
        return self.objects[collection].get(obj_id)

    def _check(self, collection, fields, creating):
        errors = {}
        if creating:
            for field in REQUIRED.get(collection, ('name',)):
                if fields.get(field) in (None, ''):
                    errors[field] = ['This field is required.']
        for field, target in COLLECTIONS[collection][1].items():
            value = fields.get(field)
            if value not in (None, '') and self._get(target, value) is None:
                errors[field] = ['Invalid pk "%s" - object does not exist.' % value]
        if collection == 'inventory_sources' and fields.get('source') == 'scm' and not fields.get('source_project'):
            errors['source_project'] = ['Project required for scm type sources.']
        if 'extra_vars' in fields:
            try:
                json.loads(fields['extra_vars'] or '{}')
            except ValueError:
                errors['extra_vars'] = ['Must be valid JSON or YAML.']
        if errors:
            raise BadRequest(errors)
        if collection == 'schedules' and 'rrule' in fields:
            validate_rrule(fields['rrule'])

    def _create(self, collection, fields):
        self._check(collection, fields, creating=True)
        obj_id = self.next_id
        self.next_id += 1
        kind, _keys, related = COLLECTIONS[collection]
        url = '%s%s/%d/' % (API, collection, obj_id)
        obj = dict(fields, id=obj_id, type=kind, url=url, summary_fields={},
                   related=dict((name, '%s%s/' % (url, name)) for name in related))
        if collection == 'projects':
            obj.setdefault('scm_revision', '')
            obj['related']['update'] = '%supdate/' % url
        for name in related:
            self.associations[(collection, obj_id, name)] = []
        self.objects[collection][obj_id] = obj
        return copy.deepcopy(obj)

    # ---- HTTP ---------------------------------------------------------------------------
    def handle(self, method, path, query, body):
        """(status, json) of one request."""
        if not path.startswith(API):
            return 404, {'detail': 'Not found.'}
        parts = [part for part in path[len(API):].split('/') if part]
        if parts in (['ping'], ['config']):
            return 200, {'version': PRODUCT[1], 'active_node': 'fake-awx', 'instances': []}
        if not parts or (parts[0] not in COLLECTIONS and parts[0] != 'unified_job_templates'):
            return 404, {'detail': 'Not found.'}
        collection = parts[0]
        with self.lock:
            if len(parts) == 1:
                if method == 'GET':
                    return 200, self._page(self._filter(self._list(collection), query))
                if method == 'POST' and collection != 'unified_job_templates':
                    return 201, self._create(collection, body)
                return 405, {'detail': 'Method "%s" not allowed.' % method}
            if not parts[1].isdigit():
                return 404, {'detail': 'Not found.'}
            obj = self._get(collection, int(parts[1]))
            if obj is None:
                return 404, {'detail': 'Not found.'}
            if len(parts) == 2:
                if method == 'GET':
                    return 200, copy.deepcopy(obj)
                if method == 'PATCH':
                    self._check(collection, body, creating=False)
                    obj.update(body)
                    return 200, copy.deepcopy(obj)
                return 405, {'detail': 'Method "%s" not allowed.' % method}
            key = (collection, obj['id'], parts[2])
            if len(parts) != 3 or key not in self.associations:
                return 404, {'detail': 'Not found.'}
            target = RELATED_TARGETS.get(parts[2], parts[2])
            if method == 'GET':
                return 200, self._page([self._get(target, item) for item in self.associations[key]])
            if method == 'POST':
                item = body.get('id')
                if self._get(target, item) is None:
                    raise BadRequest({'id': ['Invalid pk "%s" - object does not exist.' % item]})
                if body.get('disassociate'):
                    self.associations[key].remove(item)
                elif item not in self.associations[key]:
                    self.associations[key].append(item)
                return 204, None
            return 405, {'detail': 'Method "%s" not allowed.' % method}

    @staticmethod
    def _filter(objects, query):
        plain = dict((k, v) for k, v in query if not k.startswith('or__') and k not in ('page', 'page_size', 'order_by'))
        ors = dict((k[4:], v) for k, v in query if k.startswith('or__'))

        def matches(obj, field, value):
            return obj.get(field) is not None and str(obj.get(field)) == value

        found = [obj for obj in objects if all(matches(obj, k, v) for k, v in plain.items())]
        if ors:
            found = [obj for obj in found if any(matches(obj, k, v) for k, v in ors.items())]
        return sorted(found, key=lambda obj: obj['id'])

    @staticmethod
    def _page(objects):
        return {'count': len(objects), 'next': None, 'previous': None, 'results': copy.deepcopy(objects)}

    def start(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def _serve(self, method):
                url = urlsplit(self.path)
                fake.requests.append((method, url.path))
                length = int(self.headers.get('Content-Length') or 0)
                raw = self.rfile.read(length) if length else b''
                if self.headers.get('Authorization') != 'Bearer %s' % fake.token:
                    status, body = 401, {'detail': 'Authentication credentials were not provided.'}
                else:
                    try:
                        data = json.loads(raw.decode('utf-8')) if raw else {}
                        status, body = fake.handle(method, url.path, parse_qsl(url.query, keep_blank_values=True), data)
                    except BadRequest as exc:
                        status, body = 400, exc.errors
                    except ValueError as exc:
                        status, body = 400, {'detail': 'JSON parse error - %s' % exc}
                payload = b'' if body is None else json.dumps(body).encode('utf-8')
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('X-API-Product-Name', PRODUCT[0])
                self.send_header('X-API-Product-Version', PRODUCT[1])
                self.send_header('Content-Length', str(len(payload)))
                self.end_headers()
                if payload and method != 'HEAD':
                    self.wfile.write(payload)

            def do_GET(self):  # noqa: N802 (BaseHTTPRequestHandler's naming)
                self._serve('GET')

            def do_HEAD(self):  # noqa: N802
                self._serve('HEAD')

            def do_POST(self):  # noqa: N802
                self._serve('POST')

            def do_PATCH(self):  # noqa: N802
                self._serve('PATCH')

            def do_DELETE(self):  # noqa: N802
                self._serve('DELETE')

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name='fake-awx', daemon=True)
        self.thread.start()
        return 'http://127.0.0.1:%d' % self.server.server_address[1]

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

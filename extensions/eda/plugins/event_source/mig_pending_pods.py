# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_pending_pods: an ansible-rulebook event source for pods that wait for MIG slices.

It watches the Kubernetes API server for pods that the scheduler could not place for lack of a
``nvidia.com/mig-<profile>`` resource and puts one event per burst of such pods on the queue, carrying
every such pod still pending (the demand playbook plans for all of them, not only the burst's).

The event source contract is ansible-rulebook's ("Developing Custom Event Source Plugins", docs/sources.rst
of ansible/ansible-rulebook): a single Python file whose ``async def main(queue, args)`` puts dicts on the
asyncio queue; ansible-rulebook loads it with runpy from ``extensions/eda/plugins/event_source/`` of the
collection (ansible_rulebook/engine.py ``start_source``) and passes the source's arguments as ``args``.

Arguments:
  kubeconfig: path of a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config); without one the
    in-cluster service account is used (/var/run/secrets/kubernetes.io/serviceaccount, $KUBERNETES_SERVICE_HOST)
  context: kubeconfig context (default: its current-context)
  namespace: watch one namespace (default: all namespaces)
  quiet_period: seconds without a new pending MIG pod that end a burst (default 10)
  max_delay: seconds after a burst's first pod when the event goes out even if pods keep coming (default 60)
  watch_timeout: seconds each watch request asks the API server to keep open (default 300)

The bearer token is sent in the Authorization header only: never logged, never on a command line.

Event:
  mig_pending_pods:
    requests:            # every unschedulable MIG pod still pending, sorted by namespace/name; the shape
                         # the filter gpufleet.mig.mig_demand_plan takes as its pending pods
      - pod: team-a/train-0         # namespace/name
        priority: 1000              # spec.priority (0 when unset)
        priority_class: training    # spec.priorityClassName ('' when unset)
        requests: {"1g.10gb": 2}    # MIG profile -> instances the pod needs at once (gpufleet's profile names)
        created: "2026-12-03T22:00:00Z"
    new: ["team-a/train-0"]  # the pods of this burst
    burst_seconds: 10.0      # from the burst's first pod to the event

Examples:
  sources:
    - gpufleet.mig.mig_pending_pods:
        quiet_period: 10
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import base64
import json
import logging
import os
import ssl
import sys
import tempfile

try:
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import pending_mig_request, pod_key
except ImportError:
    # ansible-rulebook runs this file with runpy, outside Ansible's collection loader: the collection's own
    # module_utils are importable once the folder holding ansible_collections/ is on the path (this file is
    # ansible_collections/gpufleet/mig/extensions/eda/plugins/event_source/mig_pending_pods.py).
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 7)))
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import pending_mig_request, pod_key

LOG = logging.getLogger(__name__)

EVENT_KEY = 'mig_pending_pods'
DEFAULTS = {'quiet_period': 10.0, 'max_delay': 60.0, 'watch_timeout': 300}
SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'


class SourceError(Exception):
    """A setting or an answer of the API server this source cannot work with (one line, no secret in it)."""


# ---- one event per burst (pure) ---------------------------------------------------------------------------

class PendingDemand(object):
    """The unschedulable MIG pods of the cluster, and when to tell about them.

    A burst opens with the first pod that was not pending before (or was, left and came back) and closes
    ``quiet_period`` seconds after its latest new pod, or ``max_delay`` seconds after its first one when pods
    keep coming; then one event tells every pod still pending. Updates of pods already told about, and pods
    that leave, open no burst; a burst whose new pods all left before it closed tells nothing.
    Times are any monotonic clock in seconds (the caller's).
    """

    def __init__(self, quiet_period, max_delay):
        self.quiet_period = float(quiet_period)
        self.max_delay = float(max_delay)
        self.pending = {}
        self.told = set()
        self.burst_start = None
        self.last_new = None

    def _new_keys(self):
        return sorted(key for key in self.pending if key not in self.told)

    def update(self, pod, now, deleted=False):
        """Take one pod as the API server now has it (``deleted``: it is gone or left the watched set)."""
        key = pod_key(pod)
        request = None if deleted else pending_mig_request(pod)
        if request is None:
            self.pending.pop(key, None)
            self.told.discard(key)
            if not self._new_keys():
                self.burst_start = self.last_new = None
            return
        was_new = key not in self.pending and key not in self.told
        self.pending[key] = request
        if was_new:
            self.last_new = now
            if self.burst_start is None:
                self.burst_start = now

    def replace_all(self, pods, now):
        """A fresh list of every pod (after a start or an expired watch): pods not in it are gone."""
        listed = dict((pod_key(pod), pod) for pod in pods)
        for key in list(self.pending):
            if key not in listed:
                self.update({'metadata': dict(zip(('namespace', 'name'), key.split('/', 1)))}, now, deleted=True)
        for pod in pods:
            self.update(pod, now)

    def seconds_until_due(self, now):
        """Seconds until the open burst's event is due (0: due now), or None when no burst is open."""
        if self.burst_start is None:
            return None
        due = min(self.last_new + self.quiet_period, self.burst_start + self.max_delay)
        return max(0.0, due - now)

    def take_event(self, now):
        """The event of the burst when it is due (and the burst closed), else None."""
        wait = self.seconds_until_due(now)
        if wait is None or wait > 0:
            return None
        new = self._new_keys()
        event = {EVENT_KEY: {
            'requests': [self.pending[key] for key in sorted(self.pending)],
            'new': new,
            'burst_seconds': round(now - self.burst_start, 3),
        }}
        self.told.update(new)
        self.burst_start = self.last_new = None
        return event


def settings(args):
    """The source's settings from the rulebook's arguments; SourceError names a bad one."""
    result = dict(DEFAULTS)
    for name in DEFAULTS:
        if args.get(name) is None:
            continue
        try:
            result[name] = float(args[name])
        except (TypeError, ValueError):
            raise SourceError('%s must be a number of seconds, got %r' % (name, args[name]))
        if result[name] <= 0:
            raise SourceError('%s must be more than 0 seconds, got %r' % (name, args[name]))
    if result['max_delay'] < result['quiet_period']:
        raise SourceError('max_delay (%s) must be at least quiet_period (%s)' % (result['max_delay'], result['quiet_period']))
    result['watch_timeout'] = int(result['watch_timeout'])
    result['namespace'] = args.get('namespace') or None
    return result


def pods_path(namespace):
    """The pod collection's path (Kubernetes API reference, Pod v1 "list" and "list all namespaces")."""
    return '/api/v1/namespaces/%s/pods' % namespace if namespace else '/api/v1/pods'


# ---- where the API server is (pure over the files' contents) ----------------------------------------------

def connection_from_kubeconfig(config, context_name=None, base_dir='.'):
    """server, token/token_file, CA and client certificate of a kubeconfig context (a parsed kubeconfig:
    Kubernetes docs "Organizing Cluster Access Using kubeconfig Files"; relative paths are relative to the
    file's folder). Exec and auth-provider plugins are not supported: SourceError says so."""
    def named(section, name):
        for entry in config.get(section) or []:
            if entry.get('name') == name:
                return entry.get(section[:-1]) or {}
        raise SourceError('kubeconfig has no %s named %r' % (section[:-1], name))

    def path(value):
        return value if os.path.isabs(value) else os.path.join(base_dir, value)

    context_name = context_name or config.get('current-context')
    if not context_name:
        raise SourceError('kubeconfig has no current-context; set the source argument context')
    context = named('contexts', context_name)
    cluster = named('clusters', context.get('cluster'))
    user = named('users', context.get('user')) if context.get('user') else {}
    if user.get('exec') or user.get('auth-provider'):
        raise SourceError('kubeconfig user %r authenticates through a plugin (exec/auth-provider), which this source '
                          'does not run; use a token or a client certificate' % context.get('user'))
    if not cluster.get('server'):
        raise SourceError('kubeconfig cluster %r has no server' % context.get('cluster'))
    conn = {'server': cluster['server'].rstrip('/'), 'insecure': bool(cluster.get('insecure-skip-tls-verify'))}
    if cluster.get('certificate-authority-data'):
        conn['ca_data'] = base64.b64decode(cluster['certificate-authority-data']).decode('ascii')
    elif cluster.get('certificate-authority'):
        conn['ca_file'] = path(cluster['certificate-authority'])
    if user.get('token'):
        conn['token'] = user['token']
    elif user.get('tokenFile'):
        conn['token_file'] = path(user['tokenFile'])
    for kind in ('client-certificate', 'client-key'):
        if user.get(kind + '-data'):
            conn[kind] = base64.b64decode(user[kind + '-data'])
        elif user.get(kind):
            with open(path(user[kind]), 'rb') as handle:
                conn[kind] = handle.read()
    return conn


def connection_in_cluster(environ, account_dir=SERVICE_ACCOUNT_DIR):
    """The in-cluster connection (Kubernetes docs "Accessing the Kubernetes API from a Pod"), or None outside."""
    host, port = environ.get('KUBERNETES_SERVICE_HOST'), environ.get('KUBERNETES_SERVICE_PORT', '443')
    token_file = os.path.join(account_dir, 'token')
    if not host or not os.path.exists(token_file):
        return None
    host = '[%s]' % host if ':' in host else host
    return {'server': 'https://%s:%s' % (host, port), 'token_file': token_file,
            'ca_file': os.path.join(account_dir, 'ca.crt'), 'insecure': False}


def find_connection(args, environ):
    """The connection the arguments name: a kubeconfig (argument, $KUBECONFIG, ~/.kube/config), else in-cluster."""
    explicit = args.get('kubeconfig') or (environ.get('KUBECONFIG') or '').split(os.pathsep)[0]
    candidate = explicit or os.path.join(os.path.expanduser('~'), '.kube', 'config')
    if os.path.exists(candidate):
        import yaml  # ansible-rulebook depends on PyYAML
        with open(candidate) as handle:
            config = yaml.safe_load(handle) or {}
        return connection_from_kubeconfig(config, args.get('context'), os.path.dirname(os.path.abspath(candidate)))
    if explicit:
        raise SourceError('kubeconfig %s does not exist' % explicit)
    conn = connection_in_cluster(environ)
    if conn is None:
        raise SourceError('no kubeconfig (argument kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod')
    return conn


def _auth_headers(conn):
    token = conn.get('token')
    if conn.get('token_file'):
        # Re-read on every request: projected service account tokens are rotated by the kubelet.
        with open(conn['token_file']) as handle:
            token = handle.read().strip()
    return {'Authorization': 'Bearer ' + token} if token else {}


def _ssl_context(conn):
    if not conn['server'].startswith('https:'):
        return None
    context = ssl.create_default_context(cafile=conn.get('ca_file'), cadata=conn.get('ca_data'))
    if conn.get('insecure'):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if conn.get('client-certificate'):
        # load_cert_chain reads files only: a private folder that lives for the call.
        folder = tempfile.mkdtemp(prefix='mig-pending-pods-')
        try:
            names = []
            for kind in ('client-certificate', 'client-key'):
                name = os.path.join(folder, kind)
                with os.fdopen(os.open(name, os.O_WRONLY | os.O_CREAT, 0o600), 'wb') as handle:
                    handle.write(conn.get(kind) or conn['client-certificate'])
                names.append(name)
            context.load_cert_chain(*names)
        finally:
            for kind in ('client-certificate', 'client-key'):
                if os.path.exists(os.path.join(folder, kind)):
                    os.remove(os.path.join(folder, kind))
            os.rmdir(folder)
    return context


# ---- the watch (I/O) --------------------------------------------------------------------------------------

class _Expired(Exception):
    """The resourceVersion is too old (410 Gone): list again."""


async def _list(session, conn, config):
    """Every Pending pod, and the list's resourceVersion to watch from."""
    url = conn['server'] + pods_path(config['namespace'])
    async with session.get(url, params={'fieldSelector': 'status.phase=Pending'}, headers=_auth_headers(conn),
                           ssl=_ssl_context(conn)) as response:
        _check(response)
        body = await response.json()
    return body.get('items') or [], (body.get('metadata') or {}).get('resourceVersion', '')


def _check(response):
    if response.status == 410:
        raise _Expired()
    if response.status in (401, 403):
        raise SourceError('the API server refused the credentials (HTTP %d): the source needs get, list and watch on '
                          'pods' % response.status)
    if response.status != 200:
        raise SourceError('the API server answered HTTP %d to %s' % (response.status, response.url.path))


async def _watch(session, conn, config, demand, wake, resource_version):
    """Stream the watch from ``resource_version`` into ``demand`` until the server ends it; the last
    resourceVersion seen. Kubernetes docs "API Concepts" > "Efficient detection of changes": a watch sends
    one JSON object per line, {type: ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, object}; an expired version is
    HTTP 410 or an ERROR event whose Status has code 410. A pod that stops matching the field selector
    (scheduled: no longer Pending) comes as DELETED (apiserver's cacher, cache_watcher.go)."""
    loop = asyncio.get_event_loop()
    params = {'watch': '1', 'resourceVersion': resource_version, 'allowWatchBookmarks': 'true',
              'timeoutSeconds': str(config['watch_timeout']), 'fieldSelector': 'status.phase=Pending'}
    url = conn['server'] + pods_path(config['namespace'])
    async with session.get(url, params=params, headers=_auth_headers(conn), ssl=_ssl_context(conn)) as response:
        _check(response)
        async for line in response.content:
            if not line.strip():
                continue
            event = json.loads(line)
            kind, obj = event.get('type'), event.get('object') or {}
            if kind == 'ERROR':
                if obj.get('code') == 410:
                    raise _Expired()
                raise SourceError('watch error from the API server: %s' % obj.get('message', obj.get('reason', '')))
            resource_version = (obj.get('metadata') or {}).get('resourceVersion', resource_version)
            if kind in ('ADDED', 'MODIFIED', 'DELETED'):
                demand.update(obj, loop.time(), deleted=kind == 'DELETED')
                wake.set()
    return resource_version


async def _tell(queue, demand, wake):
    """Put each burst's event on the queue when it is due."""
    loop = asyncio.get_event_loop()
    while True:
        wait = demand.seconds_until_due(loop.time())
        try:
            await asyncio.wait_for(wake.wait(), timeout=wait)
        except asyncio.TimeoutError:
            pass
        wake.clear()
        event = demand.take_event(loop.time())
        if event is not None:
            LOG.info('mig_pending_pods: %d pod(s) wait for MIG slices, %d new', len(event[EVENT_KEY]['requests']),
                     len(event[EVENT_KEY]['new']))
            await queue.put(event)


async def main(queue, args):
    """ansible-rulebook's entry point: watch until cancelled."""
    import aiohttp  # a dependency of ansible-rulebook, where this source runs

    config = settings(args)
    conn = find_connection(args, os.environ)
    demand = PendingDemand(config['quiet_period'], config['max_delay'])
    wake = asyncio.Event()
    teller = asyncio.ensure_future(_tell(queue, demand, wake))
    loop = asyncio.get_event_loop()
    backoff = 1
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=config['watch_timeout'] + 30)) as session:
            resource_version = None
            while True:
                try:
                    if resource_version is None:
                        pods, resource_version = await _list(session, conn, config)
                        demand.replace_all(pods, loop.time())
                        wake.set()
                    resource_version = await _watch(session, conn, config, demand, wake, resource_version)
                    backoff = 1
                except _Expired:
                    LOG.info('mig_pending_pods: watch expired (410 Gone), listing the pods again')
                    resource_version = None
                except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                    LOG.warning('mig_pending_pods: API server unreachable or garbled (%s), again in %ds',
                                type(exc).__name__, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 30)
                    resource_version = None
                if teller.done():
                    teller.result()
    finally:
        teller.cancel()


if __name__ == '__main__':
    class _PrintQueue(object):
        async def put(self, event):
            print(json.dumps(event))

    asyncio.run(main(_PrintQueue(), {'kubeconfig': os.environ.get('KUBECONFIG'), 'quiet_period': 5}))

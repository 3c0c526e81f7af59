# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_pending_pods: an ansible-rulebook event source for pods that wait for MIG slices.

It lists and watches the pods of the Kubernetes API server that are not finished and puts one event per burst
on the queue, carrying every pod still waiting for lack of a ``nvidia.com/mig-<profile>`` resource (the demand
playbook plans for all of them, not only the burst's). A burst opens with a new such pod, or with a pod that held
MIG devices on a node and ended or was deleted while others still wait (the release trigger: its instances are
free again).

The event source contract is ansible-rulebook's ("Developing Custom Event Source Plugins", docs/sources.rst
of ansible/ansible-rulebook): a single Python file whose ``async def main(queue, args)`` puts dicts on the
asyncio queue; ansible-rulebook loads it with runpy from ``extensions/eda/plugins/event_source/`` of the
collection (ansible_rulebook/engine.py ``start_source``) and passes the source's arguments as ``args``.

It never ends on its own while the rulebook runs: HTTP 429 (after its Retry-After), 5xx, 401/403, a watch
ERROR, a lost connection or a line too long to read is logged in one line and followed by a new list after a
backoff; an expired resourceVersion (410) by a new list at once.

Arguments:
  kubeconfig: path of a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config), read by the kubernetes
    Python client's loader (tokens, client certificates, exec and auth-provider plugins); without one the
    in-cluster service account is used (/var/run/secrets/kubernetes.io/serviceaccount, $KUBERNETES_SERVICE_HOST)
  context: kubeconfig context (default: its current-context)
  namespace: watch one namespace (default: all namespaces)
  quiet_period: seconds without a new pending MIG pod or a release that end a burst (default 10)
  max_delay: seconds after a burst's start when the event goes out even if pods keep coming (default 60)
  watch_timeout: seconds each watch request asks the API server to keep open (default 300)
  retry_max: the longest backoff between two attempts after a failure, in seconds (default 30)
  fast: also decide create-only demand here (default false; the shipped rulebook sets it): watch the Nodes too, and
    put a mig_demand_create event for each host where waiting pods fit in free slices (below)
  fast_quiet_period: seconds without a new waiting pod before the fast decision (default 0.5, at most quiet_period)
  fast_timeout: seconds after a fast event when its pods, still waiting, go to the full path (default 120)
  policy: the demand playbook's mig_demand_policy (a mapping, or its JSON), which the fast decision honours

The bearer token is sent in the Authorization header only: never logged, never on a command line.

Event:
  mig_pending_pods:
    requests:            # every unschedulable MIG pod still pending (but those of a fast create under way),
                         # sorted by namespace/name; the shape the filter gpufleet.mig.mig_demand_plan takes
      - pod: team-a/train-0         # namespace/name
        priority: 1000              # spec.priority (0 when unset)
        priority_class: training    # spec.priorityClassName ('' when unset)
        requests: {"1g.10gb": 2}    # MIG profile -> instances the pod needs at once (gpufleet's profile names)
        created: "2026-12-03T22:00:00Z"
    new: ["team-a/train-0"]  # the pods of this burst that were not told before
    released: []             # the pods whose end or deletion freed MIG devices during this burst
    burst_seconds: 10.0      # from the burst's start to the event

  mig_demand_create:        # with fast: pods that fit in free slices of one host, as its Node's annotation
    run: fast-1a2b3c4d-1       #   gpufleet.mig/gpus says (written by the playbooks that read its GPUs)
    host: gpu-host-1           # the inventory host, and its Node
    node: gpu-node-1
    layout: {name: demand-0123456789ab, config: {...}}   # the generated layout (the full path's own)
    gpus: {"0": {"1g.20gb": 1}}  # the creates expected on each GPU: anything else is refused on the host
    pods: [team-a/infer-0]
  The run's outcome comes back as the Node's annotation gpufleet.mig/demand-create; until then the source decides
  nothing on that node; a refused or failed run, or pods still waiting fast_timeout seconds after it, go to the full
  path (a mig_pending_pods event) and are never decided here again while they wait.

Examples:
  sources:
    - gpufleet.mig.mig_pending_pods:
        quiet_period: 10
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import asyncio
import json
import logging
import os
import ssl
import sys
import time

# The decisions live in the collection's module_utils (k8s/_pending_demand: which pods and when; k8s/_fast_path: the
# create-only fast path; k8s/_api_watch: what the API server's answers mean; k8s/_slice_gate: the gate and the patch
# that releases a gated pod); this file lists, watches, patches and puts the events on the queue.
try:
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._api_watch import (
        ApiRefusal, Expired, OversizedLine, Retry, WatchLines, refusal, retry_after_seconds, watch_error)
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._fast_path import FAST_EVENT_KEY, FastPath
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_demand import EVENT_KEY, PendingDemand
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import pod_key
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._slice_gate import release_patch
except ImportError:
    # ansible-rulebook runs this file with runpy, outside Ansible's collection loader: the collection's own
    # module_utils are importable once the folder holding ansible_collections/ is on the path (this file is
    # ansible_collections/gpufleet/mig/extensions/eda/plugins/event_source/mig_pending_pods.py).
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 7)))
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._api_watch import (
        ApiRefusal, Expired, OversizedLine, Retry, WatchLines, refusal, retry_after_seconds, watch_error)
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._fast_path import FAST_EVENT_KEY, FastPath
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_demand import EVENT_KEY, PendingDemand
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import pod_key
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._slice_gate import release_patch

LOG = logging.getLogger(__name__)

DEFAULTS = {'quiet_period': 10.0, 'max_delay': 60.0, 'watch_timeout': 300, 'retry_max': 30.0,
            'fast_quiet_period': 0.5, 'fast_timeout': 120.0}
SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'
# The pods not finished: waiting ones and those holding devices. A pod that ends (Succeeded, Failed) leaves the
# selection and comes as DELETED, as a deleted one does (the apiserver's cacher, cache_watcher.go).
FIELD_SELECTOR = 'status.phase!=Succeeded,status.phase!=Failed'
# Pages of a list: client-go's pager asks for 500 objects a page (tools/pager/pager.go, defaultPageSize).
PAGE_SIZE = 500


class SourceError(Exception):
    """A setting or an answer of the API server this source cannot work with (one line, no secret in it)."""


# ---- settings -------------------------------------------------------------------------------------------------

def settings(args):
    """The source's settings from the rulebook's arguments; SourceError names a bad one."""
    result = dict(DEFAULTS)
    for name in DEFAULTS:
        if args.get(name) is None or args.get(name) == '':
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
    fast = args.get('fast', False)
    if isinstance(fast, str):
        if fast.strip().lower() not in ('true', 'false', 'yes', 'no', ''):
            raise SourceError('fast must be true or false, got %r' % fast)
        fast = fast.strip().lower() in ('true', 'yes')
    result['fast'] = bool(fast)
    if result['fast'] and result['fast_quiet_period'] > result['quiet_period']:
        raise SourceError('fast_quiet_period (%s) must be at most quiet_period (%s): the fast path decides before the full '
                          'path is told' % (result['fast_quiet_period'], result['quiet_period']))
    policy = args.get('policy') or {}
    if isinstance(policy, str):
        try:
            # JSON, or the Python form a rulebook's Jinja renders a mapping in.
            policy = json.loads(policy) if policy.strip()[:1] != '{' or '"' in policy else ast.literal_eval(policy)
        except (ValueError, SyntaxError):
            raise SourceError('policy must be a mapping (the demand playbook\'s mig_demand_policy), got %r' % policy[:80])
    if not isinstance(policy, dict):
        raise SourceError('policy must be a mapping (the demand playbook\'s mig_demand_policy), got %r' % (policy,))
    result['policy'] = policy
    return result


def pods_path(namespace):
    """The pod collection's path (Kubernetes API reference, Pod v1 "list" and "list all namespaces")."""
    return '/api/v1/namespaces/%s/pods' % namespace if namespace else '/api/v1/pods'


NODES_PATH = '/api/v1/nodes'


# ---- where the API server is --------------------------------------------------------------------------------

class Connection(object):
    """The API server's address, its TLS settings, and the Authorization header of the next request.

    ``authorization`` is called before each request: a kubeconfig's exec or auth-provider credential is
    refreshed there when it expired (the kubernetes client's refresh hook), a service account token re-read."""

    def __init__(self, server, authorization=None, ca_file=None, cert_file=None, key_file=None, insecure=False,
                 tls_server_name=None, proxy=None):
        self.server = server.rstrip('/')
        self.authorization = authorization or (lambda: None)
        self.ca_file = ca_file
        self.cert_file = cert_file
        self.key_file = key_file
        self.insecure = insecure
        self.tls_server_name = tls_server_name
        self.proxy = proxy
        self._ssl = None

    def headers(self):
        value = self.authorization()
        return {'Authorization': value} if value else {}

    def ssl_context(self):
        """The TLS context of https servers (built once), None for plain http."""
        if not self.server.startswith('https:'):
            return None
        if self._ssl is None:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file)
            self._ssl = context
        return self._ssl

    def request_options(self):
        """aiohttp's per-request options beyond the URL: TLS context, the name to verify, the proxy."""
        options = {'ssl': self.ssl_context()}
        if self.tls_server_name:
            options['server_hostname'] = self.tls_server_name
        if self.proxy:
            options['proxy'] = self.proxy
        return options


def connection_from_kubeconfig(path, context_name=None):
    """A Connection from a kubeconfig file as the kubernetes Python client reads it (kubernetes-client/python
    kubernetes/config/kube_config.py, KubeConfigLoader: auth-provider (gcp, oidc), token and tokenFile, exec
    plugins (client.authentication.k8s.io ExecCredential: token or client certificate, re-run once its
    expirationTimestamp passed), username/password; certificate data written to private temporary files). The
    kubeconfig is not written back (persist_config=False)."""
    try:
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config
    except ImportError:
        raise SourceError('reading kubeconfig %s needs the Python package kubernetes in the environment of '
                          'ansible-rulebook (pip install kubernetes); without a kubeconfig the source uses the pod\'s '
                          'service account' % path)
    configuration = k8s_client.Configuration()
    configuration.host = ''  # not the client's default (http://localhost): a kubeconfig without a server is refused
    try:
        k8s_config.load_kube_config(config_file=path, context=context_name, client_configuration=configuration,
                                    persist_config=False)
    except (k8s_config.ConfigException, EnvironmentError, ValueError, KeyError, TypeError) as exc:
        raise SourceError('kubeconfig %s: %s' % (path, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
    if not configuration.host:
        raise SourceError('kubeconfig %s names no server for context %s' % (path, context_name or 'current-context'))

    def authorization():
        # The loader keeps "Bearer <token>" (or "Basic ...") under BearerToken; asking for it runs its refresh hook.
        # It keeps a tokenFile's final newline, which kubectl strips (client-go rest.Config's BearerTokenFile).
        value = configuration.get_api_key_with_prefix('BearerToken', alias='authorization')
        return value.strip() if value else None

    return Connection(configuration.host, authorization, ca_file=configuration.ssl_ca_cert,
                      cert_file=configuration.cert_file, key_file=configuration.key_file,
                      insecure=not configuration.verify_ssl, tls_server_name=getattr(configuration, 'tls_server_name', None),
                      proxy=configuration.proxy)


def connection_in_cluster(environ, account_dir=SERVICE_ACCOUNT_DIR):
    """The in-cluster connection (Kubernetes docs "Accessing the Kubernetes API from a Pod"), or None outside."""
    host, port = environ.get('KUBERNETES_SERVICE_HOST'), environ.get('KUBERNETES_SERVICE_PORT', '443')
    token_file = os.path.join(account_dir, 'token')
    if not host or not os.path.exists(token_file):
        return None
    host = '[%s]' % host if ':' in host else host

    def authorization():
        # Re-read on every request: projected service account tokens are rotated by the kubelet.
        with open(token_file) as handle:
            return 'Bearer ' + handle.read().strip()

    return Connection('https://%s:%s' % (host, port), authorization, ca_file=os.path.join(account_dir, 'ca.crt'))


def find_connection(args, environ):
    """The connection the arguments name: a kubeconfig (argument, $KUBECONFIG, ~/.kube/config), else in-cluster."""
    explicit = args.get('kubeconfig') or (environ.get('KUBECONFIG') or '').split(os.pathsep)[0]
    candidate = explicit or os.path.join(os.path.expanduser('~'), '.kube', 'config')
    if os.path.exists(candidate):
        return connection_from_kubeconfig(candidate, args.get('context') or None)
    if explicit:
        raise SourceError('kubeconfig %s does not exist' % explicit)
    conn = connection_in_cluster(environ)
    if conn is None:
        raise SourceError('no kubeconfig (argument kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod')
    return conn


# ---- the list and the watch (I/O) --------------------------------------------------------------------------

async def _headers(conn):
    # An exec plugin may take a second or more (a cloud CLI): off the event loop.
    return await asyncio.get_event_loop().run_in_executor(None, conn.headers)


def _check(response, now_epoch):
    """Nothing for 200; else Expired or the ApiRefusal the answer means."""
    if response.status != 200:
        raise refusal(response.status, response.url.path,
                      retry_after_seconds(response.headers.get('Retry-After'), now_epoch))


async def _list(session, conn, config, path=None, field_selector=FIELD_SELECTOR):
    """Every pod not finished (or every object of ``path``), page by page (Kubernetes docs "API Concepts" >
    "Retrieving large results sets in chunks": limit and continue; an expired continue token is 410), and the
    list's resourceVersion to watch from."""
    url = conn.server + (path or pods_path(config['namespace']))
    items, token = [], None
    while True:
        params = {'limit': str(PAGE_SIZE)}
        if field_selector:
            params['fieldSelector'] = field_selector
        if token:
            params['continue'] = token
        async with session.get(url, params=params, headers=await _headers(conn), **conn.request_options()) as response:
            _check(response, time.time())
            body = await response.json(content_type=None)
        items.extend(body.get('items') or [])
        metadata = body.get('metadata') or {}
        token = metadata.get('continue')
        if not token:
            return items, metadata.get('resourceVersion', '')


async def _watch(session, conn, config, demand, wake, resource_version, path=None, field_selector=FIELD_SELECTOR, nodes=False):
    """Stream the watch from ``resource_version`` into ``demand`` until the server ends it; the last
    resourceVersion seen. Kubernetes docs "API Concepts" > "Efficient detection of changes": a watch sends
    one JSON object per line, {type: ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, object}; an expired version is
    HTTP 410 or an ERROR event whose Status has code 410."""
    loop = asyncio.get_event_loop()
    params = {'watch': '1', 'resourceVersion': resource_version, 'allowWatchBookmarks': 'true',
              'timeoutSeconds': str(config['watch_timeout'])}
    if field_selector:
        params['fieldSelector'] = field_selector
    url = conn.server + (path or pods_path(config['namespace']))
    lines = WatchLines()
    async with session.get(url, params=params, headers=await _headers(conn), **conn.request_options()) as response:
        _check(response, time.time())
        async for data in response.content.iter_any():
            for line in lines.feed(data):
                event = json.loads(line)
                kind, obj = event.get('type'), event.get('object') or {}
                if kind == 'ERROR':
                    raise watch_error(obj)
                resource_version = (obj.get('metadata') or {}).get('resourceVersion', resource_version)
                if kind in ('ADDED', 'MODIFIED', 'DELETED'):
                    if nodes:
                        demand.update_node(obj, loop.time(), deleted=kind == 'DELETED')
                    else:
                        demand.update(obj, loop.time(), deleted=kind == 'DELETED')
                    wake.set()
    return resource_version


def pod_path(key):
    """One pod's path, from its ``namespace/name`` (Kubernetes API reference, Pod v1 "patch")."""
    namespace, name = key.split('/', 1)
    return '/api/v1/namespaces/%s/pods/%s' % (namespace, name)


async def release_gated_pod(session, conn, pod, node=None):
    """Hand a gated pod over to kube-scheduler: take the slice gate (gpufleet.mig/slice) off ``pod`` and, with ``node``, narrow
    its required node affinity to that node, in one strategic merge patch (k8s/_slice_gate.release_patch: the pod's
    other gates and affinity terms stay). The pod as the API server has it after the patch; an ApiRefusal for any
    other answer than 200 (404: the pod is gone; 422: the API server refused the change)."""
    url = conn.server + pod_path(pod_key(pod))
    headers = dict(await _headers(conn))
    headers['Content-Type'] = 'application/strategic-merge-patch+json'
    async with session.patch(url, data=json.dumps(release_patch(pod, node)), headers=headers,
                             **conn.request_options()) as response:
        _check(response, time.time())
        return await response.json(content_type=None)


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
        for fast in demand.take_fast_events(loop.time()):
            change = fast[FAST_EVENT_KEY]
            LOG.info('mig_pending_pods: fast create %s on host %s (node %s): %s for %s', change['run'], change['host'],
                     change['node'], json.dumps(change['gpus'], sort_keys=True), ', '.join(change['pods']))
            await queue.put(fast)
        event = demand.take_event(loop.time())
        if event is not None:
            told = event[EVENT_KEY]
            LOG.info('mig_pending_pods: %d pod(s) wait for MIG slices, %d new, %d released', len(told['requests']),
                     len(told['new']), len(told['released']))
            await queue.put(event)


def _reconnect(conn, args):
    """The connection read again (a refused credential may have been renewed: client-go's exec authenticator
    also refreshes on a 401, plugin/pkg/client/auth/exec/exec.go); the old one where it cannot be read now."""
    try:
        return find_connection(args, os.environ)
    except SourceError as exc:
        LOG.warning('mig_pending_pods: cannot read the credentials again (%s); keeping the previous ones', exc)
        return conn


async def _list_and_watch(session, conn, args, config, demand, wake, nodes=False):
    """List, then watch, the pods (or, ``nodes``, the Nodes) into ``demand`` until cancelled, through every failure."""
    import aiohttp  # a dependency of ansible-rulebook, where this source runs

    what = 'nodes' if nodes else 'pods'
    path, selector = (NODES_PATH, None) if nodes else (None, FIELD_SELECTOR)
    retry = Retry(config['retry_max'])
    loop = asyncio.get_event_loop()
    resource_version = None
    while True:
        problem, retry_after = None, None
        try:
            if resource_version is None:
                items, resource_version = await _list(session, conn, config, path, selector)
                if nodes:
                    demand.replace_nodes(items, loop.time())
                else:
                    demand.replace_all(items, loop.time())
                wake.set()
            resource_version = await _watch(session, conn, config, demand, wake, resource_version, path, selector, nodes)
        except Expired:
            LOG.info('mig_pending_pods: the resourceVersion expired (410 Gone), listing the %s again', what)
            resource_version = None
        except ApiRefusal as exc:
            problem, retry_after = str(exc), exc.retry_after
            if exc.status in (401, 403):
                conn = _reconnect(conn, args)
        except OversizedLine as exc:
            problem = str(exc)
        except (aiohttp.ClientError, aiohttp.http_exceptions.HttpProcessingError, asyncio.TimeoutError,
                EnvironmentError, ValueError) as exc:
            problem = 'the API server is unreachable or its answer unreadable (%s: %s)' % (
                type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else '')
        except Exception as exc:  # pylint: disable=broad-except
            # Never end while the rulebook runs: anything unforeseen is logged and retried like a failure.
            problem = 'unexpected %s: %s' % (type(exc).__name__, str(exc)[:200])
        if problem is not None:
            wait = retry.delay(loop.time(), retry_after)
            if nodes:
                problem = problem.replace('on pods', 'on nodes')
            LOG.warning('mig_pending_pods: %s; listing the %s again in %.1fs', problem, what, wait)
            resource_version = None
            await asyncio.sleep(wait)


async def main(queue, args):
    """ansible-rulebook's entry point: list and watch until cancelled, through every failure. With ``fast``, the
    Nodes are watched too (their GPU annotations), in a task of their own: a failure of one watch leaves the other."""
    import aiohttp  # a dependency of ansible-rulebook, where this source runs

    config = settings(args)
    conn = find_connection(args, os.environ)
    fast = FastPath(config['fast_quiet_period'], config['fast_timeout'], config['policy']) if config['fast'] else None
    demand = PendingDemand(config['quiet_period'], config['max_delay'], fast)
    wake = asyncio.Event()
    tasks = [asyncio.ensure_future(_tell(queue, demand, wake))]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=config['watch_timeout'] + 30)) as session:
            tasks.append(asyncio.ensure_future(_list_and_watch(session, conn, args, config, demand, wake)))
            if fast is not None:
                tasks.append(asyncio.ensure_future(_list_and_watch(session, conn, args, config, demand, wake, nodes=True)))
            done, dummy = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
    finally:
        for task in tasks:
            task.cancel()


if __name__ == '__main__':
    class _PrintQueue(object):
        async def put(self, event):
            print(json.dumps(event))

    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(_PrintQueue(), {'kubeconfig': os.environ.get('KUBECONFIG'), 'quiet_period': 5}))

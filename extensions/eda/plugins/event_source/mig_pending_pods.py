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
  gated: decide the pods that carry the slice gate gpufleet.mig/slice (the gpu_tenancy role's slice gate) one at a
    time in kube-scheduler's queue order (default false; k8s/_gated_demand): each is pinned to a node where an idle
    instance of its profile waits, or one is created for it in free slices or in the slices of idle instances of other
    profiles destroyed for it (a mig_demand_create event, as the fast path's, its run destroying only idle
    instances), then its gate is removed; watches the Nodes too
  gated_destroy_after: seconds an instance stays idle after the pod that held it ended before a run destroys it
    (default 2), or keep (kept until another profile needs its slices)
  gated_release_after: seconds after its creation when a gated pod nobody serves is released to kube-scheduler with
    its reason logged (default 1800)
  gated_order: queue (kube-scheduler's: priority, then creation) or smallest-first (default queue)
  gated_placement: pack (the most allocated node first) or spread (default pack)
  gated_resources: the resource names, besides nvidia.com/mig-<profile>, that the device plugin gives MIG devices
    (time-slicing's rename: the names the slice gate gates besides nvidia.com/mig-*), a list or its JSON (default
    none). A pod waiting for one keeps every idle instance of the nodes that advertise it (the destroy guard)

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
import sys
import time
from dataclasses import replace

# The decisions live in the collection's module_utils (k8s/_pending_demand: which pods and when; k8s/_fast_path: the
# create-only fast path; k8s/_api_watch: what the API server's answers mean; k8s/_slice_gate: the gate and the patch
# that releases a gated pod); this file lists, watches, patches and puts the events on the queue.
try:
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._api_connection import SourceError, find_connection
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._api_watch import (
        ApiRefusal, Expired, OversizedLine, Retry, WatchLines, refusal, retry_after_seconds, watch_error)
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._fast_path import FAST_EVENT_KEY, FastPath
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gated_demand import (
        PIN, SOURCE_OPTIONS, GatedDemand, GatedOptions)
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_demand import EVENT_KEY, PendingDemand
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import pod_key
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._slice_gate import SliceGateError, gated_resources, release_patch
except ImportError:
    # ansible-rulebook runs this file with runpy, outside Ansible's collection loader: the collection's own
    # module_utils are importable once the folder holding ansible_collections/ is on the path (this file is
    # ansible_collections/gpufleet/mig/extensions/eda/plugins/event_source/mig_pending_pods.py).
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 7)))
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._api_connection import SourceError, find_connection
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._api_watch import (
        ApiRefusal, Expired, OversizedLine, Retry, WatchLines, refusal, retry_after_seconds, watch_error)
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._fast_path import FAST_EVENT_KEY, FastPath
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gated_demand import (
        PIN, SOURCE_OPTIONS, GatedDemand, GatedOptions)
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_demand import EVENT_KEY, PendingDemand
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import pod_key
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._slice_gate import SliceGateError, gated_resources, release_patch

LOG = logging.getLogger(__name__)

DEFAULTS = {'quiet_period': 10.0, 'max_delay': 60.0, 'watch_timeout': 300, 'retry_max': 30.0,
            'fast_quiet_period': 0.5, 'fast_timeout': 120.0, 'gated_release_after': 1800.0}
# The pods not finished: waiting ones and those holding devices. A pod that ends (Succeeded, Failed) leaves the
# selection and comes as DELETED, as a deleted one does (the apiserver's cacher, cache_watcher.go).
FIELD_SELECTOR = 'status.phase!=Succeeded,status.phase!=Failed'
# The gated queue decides once for the changes of this many seconds (a list, a burst of pods): each decision reads every
# gated pod and GPU.
GATED_BATCH = 0.1
# Pages of a list: client-go's pager asks for 500 objects a page (tools/pager/pager.go, defaultPageSize).
PAGE_SIZE = 500


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
    for name in ('fast', 'gated'):
        value = args.get(name, False)
        if isinstance(value, str):
            if value.strip().lower() not in ('true', 'false', 'yes', 'no', ''):
                raise SourceError('%s must be true or false, got %r' % (name, value))
            value = value.strip().lower() in ('true', 'yes')
        result[name] = bool(value)
    destroy_after = args.get('gated_destroy_after', SOURCE_OPTIONS.get('destroy_after', GatedOptions.destroy_after))
    if isinstance(destroy_after, str):
        try:
            destroy_after = None if destroy_after.strip().lower() == 'keep' else float(destroy_after)
        except ValueError:
            raise SourceError('gated_destroy_after must be a number of seconds or keep, got %r' % destroy_after)
    result['gated_options'] = GatedOptions(**dict(SOURCE_OPTIONS, release_after=result['gated_release_after'],
                                                  order=args.get('gated_order') or 'queue',
                                                  placement=args.get('gated_placement') or 'pack', destroy_after=destroy_after))
    problem = result['gated_options'].problem()
    if problem:
        raise SourceError('gated_' + problem)
    if result['gated'] and result['namespace']:
        # The destroy guard needs every pod that could be given an instance (planning/_destroy_guard): one namespace's
        # watch cannot see them all, so the queue only serves and creates there.
        LOG.warning('mig_pending_pods: gated with namespace %s: the gated queue destroys no instance (no reshape, idle '
                    'instances kept)', result['namespace'])
        result['gated_options'] = replace(result['gated_options'], destroy_after=None, reshape=False)
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
    result['gated_resources'] = _resource_names(args.get('gated_resources'))
    if result['gated'] and result['gated_resources']:
        LOG.info('mig_pending_pods: the destroy guard reads %s as MIG devices of any profile', ', '.join(result['gated_resources']))
    return result


def _resource_names(value):
    """The ``gated_resources`` argument: a list of resource names, or its JSON (the form a rulebook's Jinja may render)."""
    if isinstance(value, str) and value.strip():
        try:
            value = json.loads(value)
        except ValueError:
            try:
                value = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):
                pass
    if value is None or value == '':
        value = []
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise SourceError('gated_resources must be a list of resource names (such as nvidia.com/small-gpu), got %r' % (value,))
    try:
        return gated_resources(extra=value)
    except SliceGateError as exc:
        raise SourceError('gated_resources: %s' % exc)


def pods_path(namespace):
    """The pod collection's path (Kubernetes API reference, Pod v1 "list" and "list all namespaces")."""
    return '/api/v1/namespaces/%s/pods' % namespace if namespace else '/api/v1/pods'


NODES_PATH = '/api/v1/nodes'


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


class Watched(object):
    """What the watches see, told to the pending demand and, with ``gated``, to the gated queue (on wall-clock time,
    the pods' creation times being wall-clock), whose task ``wake_gated`` wakes."""

    def __init__(self, demand, gated=None, wake_gated=None):
        self.demand, self.gated, self.wake_gated = demand, gated, wake_gated

    def _woken(self):
        if self.gated is not None:
            self.wake_gated.set()
        return self.gated

    def _owned(self, pod):
        return self.gated is not None and self.gated.owns(pod)

    def update(self, pod, now, deleted=False):
        # A pod the gated queue pinned waits for its instance there, not on the full path.
        self.demand.update(pod, now, deleted or self._owned(pod))
        if self._woken():
            self.gated.update_pod(pod, deleted)

    def update_node(self, node, now, deleted=False):
        self.demand.update_node(node, now, deleted)
        if self._woken():
            self.gated.update_node(node, time.time(), deleted)

    def replace_all(self, pods, now):
        self.demand.replace_all([pod for pod in pods if not self._owned(pod)], now)
        if self._woken():
            self.gated.replace_pods(pods)

    def replace_nodes(self, nodes, now):
        self.demand.replace_nodes(nodes, now)
        if self._woken():
            self.gated.replace_nodes(nodes, time.time())


async def _drive_gated(queue, gated, wake, session, conn):
    """The gated queue's actions when due: pods pinned to a node or released by a patch, create runs put on the queue.
    A patch that fails is logged and its pod decided again at the next change."""
    while True:
        try:
            await asyncio.wait_for(wake.wait(), timeout=gated.seconds_until_due(time.time()))
        except asyncio.TimeoutError:
            pass
        await asyncio.sleep(GATED_BATCH)
        wake.clear()
        for action in gated.take_actions(time.time()):
            if 'event' in action:
                change = action['event'][FAST_EVENT_KEY]
                LOG.info('mig_pending_pods: gated create %s on node %s: %s for %s%s', change['run'], change['node'],
                         json.dumps(change['gpus'], sort_keys=True), ', '.join(change['pods']) or 'nobody',
                         ', destroying idle %s' % json.dumps(change['destroys'], sort_keys=True) if 'destroys' in change else '')
                await queue.put(action['event'])
                continue
            node, pod = action['node'] if action['action'] == PIN else None, gated.pods.get(action['pod'])
            if pod is None:
                continue   # deleted while an earlier patch was under way
            try:
                await release_gated_pod(session, conn, pod, node)
            except Exception as exc:  # pylint: disable=broad-except
                # Never end while the rulebook runs: a refused or failed patch leaves the pod to the next decision.
                LOG.warning('mig_pending_pods: cannot take the slice gate off %s (%s: %s)', action['pod'],
                            type(exc).__name__, str(exc)[:200])
                gated.patch_failed(action['pod'])
                continue
            LOG.info('mig_pending_pods: %s', 'pinned %s to node %s' % (action['pod'], node) if node else
                     'released %s to kube-scheduler: %s' % (action['pod'], action['reason']))


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
    gated = GatedDemand(config['gated_options'], config['fast_timeout'], renamed=config['gated_resources']) if config['gated'] else None
    wake, wake_gated = asyncio.Event(), asyncio.Event()
    watched = Watched(demand, gated, wake_gated)
    tasks = [asyncio.ensure_future(_tell(queue, demand, wake))]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=config['watch_timeout'] + 30)) as session:
            tasks.append(asyncio.ensure_future(_list_and_watch(session, conn, args, config, watched, wake)))
            if fast is not None or gated is not None:
                tasks.append(asyncio.ensure_future(_list_and_watch(session, conn, args, config, watched, wake, nodes=True)))
            if gated is not None:
                tasks.append(asyncio.ensure_future(_drive_gated(queue, gated, wake_gated, session, conn)))
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

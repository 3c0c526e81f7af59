# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A test device plugin for the node of tests/cluster/node.sh: what NVIDIA's k8s-device-plugin does
with ``migStrategy: mixed`` and ``deviceIDStrategy: uuid``, on a simulated GPU host.

  device_plugin.py --plugin-dir DIR --node-name NAME --server URL --ca-file CA --token-file FILE
                   --status-file FILE [--poll SECONDS]
  device_plugin.py --list        print the resources of the simulated host as JSON and exit

The GPUs come from pynvml with the NVML simulator (GPUFLEET_MIG_SIMULATOR names the host's state
file; the repository's simulator/ folder is put on the path from this file's location). Per GPU
with MIG enabled, every MIG device (nvmlDeviceGetMigDeviceHandleByIndex) whose compute instance
is full-size is one device of ``nvidia.com/mig-<profile>`` ('+' in the profile becomes '.'), its
id the MIG UUID; a GPU with MIG disabled is one ``nvidia.com/gpu`` with its GPU UUID.

It speaks the kubelet's device plugin API v1beta1 over gRPC (grpcio, with the protobuf codec of
plugins/module_utils/k8s/_pod_resources.py): one server per resource on DIR/gpufleet-<name>.sock,
registered through DIR/kubelet.sock; GetDevicePluginOptions, ListAndWatch (a stream, every device
Healthy), GetPreferredAllocation, Allocate (NVIDIA_VISIBLE_DEVICES=<ids>, as the envvar device list
strategy) and PreStartContainer.

Like the DaemonSet pod that the GPU operator pauses, it serves only while the node's label
nvidia.com/gpu.deploy.device-plugin is "true" (polled from the API server every --poll seconds):
otherwise it stops its servers and removes their sockets, so the kubelet marks the devices
unhealthy (allocatable 0) and drops them after its grace period; when the label comes back it
enumerates the GPUs again and registers anew. It also re-enumerates on SIGHUP, and restarts and
re-registers its servers when the kubelet re-creates kubelet.sock (a starting kubelet deletes
every plugin socket). SIGTERM or SIGINT: stop, remove the sockets and the status file, exit 0.

The mode file (--mode-file, JSON, read at each enumeration; absent: the defaults) sets what the
cluster checks need of a plugin: "device_id_strategy": "uuid" (default) or "index" (NVIDIA's
deviceIDStrategy index: '<gpu index>:<MIG device index>', the position in the GPU's list of MIG
devices), "keep_destroyed": true makes every enumeration keep advertising the ids of the one
before that are gone (a plugin that still advertises destroyed instances: counts stay high, the
id sets do not match), and "time_slicing": [{"name", "replicas", "rename"}] (the device_plugin
role's device_plugin_time_slicing entries) advertises each device of resource ``name`` once per
replica as '<id>::<n>', under ``rename`` when given (e.g. nvidia.com/small-gpu), with the bare ids in
NVIDIA_VISIBLE_DEVICES.

The status file (JSON, replaced atomically) says {"state": "starting" | "serving" | "paused" |
"waiting-for-kubelet", "label": the label's value, "resources": {resource: [ids]} being served,
"mode": the mode in effect, "registrations": count, "enumerations": count, "allocations":
[{"resource", "device_ids", "uuids": the MIG UUIDs those ids named when allocated}], "pid"}.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import importlib.util
import json
import os
import signal
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent import futures

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

API_VERSION = 'v1beta1'
DEPLOY_LABEL = 'nvidia.com/gpu.deploy.device-plugin'
VISIBLE_DEVICES_ENV = 'NVIDIA_VISIBLE_DEVICES'

# The simulator's folder and variable, as every test names them (run as a script: the repository on the path first).
if REPO not in sys.path:
    sys.path.insert(0, REPO)
from tests.support.simulator import SIMULATOR_ENV, simulator_on_path  # noqa: E402


MODULE_UTILS = 'ansible_collections.gpufleet.mig.plugins.module_utils'


def _load_module_util(name):
    """A module_utils file of this repository by path, registered under its collection name so that the
    module_utils it imports (loaded first, by the caller) resolve without the collection on the path.
    One already imported (the collection on the path, as in the tests) is reused, never loaded twice."""
    if '%s.%s' % (MODULE_UTILS, name) in sys.modules:
        return sys.modules['%s.%s' % (MODULE_UTILS, name)]
    path = os.path.join(REPO, 'plugins', 'module_utils', *name.split('.')) + '.py'
    spec = importlib.util.spec_from_file_location('%s.%s' % (MODULE_UTILS, name), path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# In import order, each after the files it imports: _pod_resources imports _pod_resources_wire and _gpu_resources,
# which imports _mig_profile; _pod_cgroups imports _pod_resources.
MigProfile = _load_module_util('planning._mig_profile').MigProfile
_load_module_util('planning._gpu_resources')
wire = _load_module_util('k8s._pod_resources_wire')
pod_resources = _load_module_util('k8s._pod_resources')
pod_cgroups = _load_module_util('k8s._pod_cgroups')


def log(message):
    sys.stderr.write('%s device-plugin[%d]: %s\n' % (time.strftime('%H:%M:%S'), os.getpid(), message))
    sys.stderr.flush()


# ---- the simulated GPUs --------------------------------------------------------------------------

def _text(value):
    return value.decode('utf-8', 'replace') if isinstance(value, bytes) else value


def resource_name(profile_name):
    """'1g.10gb+me' -> 'nvidia.com/mig-1g.10gb.me', NVIDIA's mixed strategy naming."""
    return 'nvidia.com/mig-' + profile_name.replace('+', '.')


def enumerate_resources(state_path=None, strategy='uuid'):
    """``{resource: [device ids]}`` of the host, ids by ``strategy`` (uuid or index)."""
    return dict((resource, [device[strategy] for device in devices])
                for resource, devices in enumerate_devices(state_path).items())


def enumerate_devices(state_path=None):
    """``{resource: [{'uuid': id, 'index': '<gpu>:<mig device>'}]}`` of the host (a whole GPU's index id is
    its index): the simulated one when ``state_path`` (or GPUFLEET_MIG_SIMULATOR) names its state file,
    else the real NVML."""
    import pynvml

    state_path = state_path or os.environ.get(SIMULATOR_ENV)
    if state_path:
        simulator_on_path().install(pynvml, state_path)
    pynvml.nvmlInit()
    try:
        resources = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            gpu = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                mig_enabled = pynvml.nvmlDeviceGetMigMode(gpu)[0] == pynvml.NVML_DEVICE_MIG_ENABLE
            except pynvml.NVMLError_NotSupported:
                mig_enabled = False
            if not mig_enabled:
                resources.setdefault('nvidia.com/gpu', []).append({'uuid': _text(pynvml.nvmlDeviceGetUUID(gpu)),
                                                                   'index': str(index)})
                continue
            for mig_index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu)):
                try:
                    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, mig_index)
                except pynvml.NVMLError_NotFound:
                    continue
                # 'NVIDIA A100-SXM4-80GB MIG 1g.10gb'; a smaller compute instance is '... MIG 1c.3g.40gb'.
                name = _text(pynvml.nvmlDeviceGetName(mig))
                if ' MIG ' not in name:
                    raise RuntimeError('GPU %d MIG device %d has the unexpected name %r' % (index, mig_index, name))
                profile = MigProfile.parse(name.split(' MIG ', 1)[1])
                if profile.is_compute_instance_profile:
                    continue  # NVIDIA's plugin advertises full-size compute instances only
                resources.setdefault(resource_name(profile.name), []).append(
                    {'uuid': _text(pynvml.nvmlDeviceGetUUID(mig)), 'index': '%d:%d' % (index, mig_index)})
        return resources
    finally:
        pynvml.nvmlShutdown()


DEFAULT_MODE = {'device_id_strategy': 'uuid', 'keep_destroyed': False, 'time_slicing': []}
# NVIDIA's plugin marks each replica of a shared device '<id>::<n>' (api/config/v1 AnnotatedID).
REPLICA_SEPARATOR = '::'


def _time_slicing_problem(entries):
    """Why the mode's time_slicing (the device_plugin role's device_plugin_time_slicing entries: name, replicas,
    rename) is not usable, or None."""
    if not isinstance(entries, list):
        return 'time_slicing must be a list of {name, replicas, rename}'
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) - {'name', 'replicas', 'rename'} or 'name' not in entry:
            return 'time_slicing entry %r is not {name, replicas[, rename]}' % (entry,)
        replicas = entry.get('replicas')
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
            return 'time_slicing entry %r: replicas must be a whole number >= 2' % (entry,)
    return None


def read_mode(path):
    """The mode file's settings over DEFAULT_MODE; a missing file is the defaults, a bad one an error."""
    mode = dict(DEFAULT_MODE)
    if path and os.path.exists(path):
        with open(path) as handle:
            given = json.load(handle)
        unknown = sorted(set(given) - set(DEFAULT_MODE))
        if unknown:
            raise ValueError('mode file %s: unknown setting(s) %s' % (path, ', '.join(unknown)))
        mode.update(given)
    if mode['device_id_strategy'] not in ('uuid', 'index'):
        raise ValueError('mode file %s: device_id_strategy must be uuid or index, not %r' % (path, mode['device_id_strategy']))
    problem = _time_slicing_problem(mode['time_slicing'])
    if problem:
        raise ValueError('mode file %s: %s' % (path, problem))
    return mode


def advertised(devices, mode, before=None):
    """``({resource: [ids]}, {id: uuid})`` to serve from ``devices`` (enumerate_devices) in ``mode``.
    With keep_destroyed, the ids of ``before`` (the last enumeration's ``{resource: [ids]}``) that are gone
    stay advertised after the current ones, as a plugin that never drops a device would."""
    strategy = mode['device_id_strategy']
    resources = dict((resource, [device[strategy] for device in found]) for resource, found in devices.items())
    names = dict((device[strategy], device['uuid']) for found in devices.values() for device in found)
    # Time-slicing as NVIDIA's plugin does it: each device once per replica ('<id>::<n>'), under ``rename`` when given.
    for entry in mode.get('time_slicing') or []:
        ids = resources.pop(entry['name'], None)
        if ids is None:
            continue
        shared = resources.setdefault(entry.get('rename') or entry['name'], [])
        for device_id in ids:
            for replica in range(entry['replicas']):
                shared.append('%s%s%d' % (device_id, REPLICA_SEPARATOR, replica))
                names[shared[-1]] = names[device_id]
    if mode['keep_destroyed']:
        for resource, ids in (before or {}).items():
            current = resources.setdefault(resource, [])
            current.extend(device_id for device_id in ids if device_id not in current)
    return resources, names


# ---- v1beta1 messages ------------------------------------------------------------------------------
# DevicePluginOptions {bool pre_start_required = 1; bool get_preferred_allocation_available = 2}
# RegisterRequest {string version = 1; string endpoint = 2; string resource_name = 3; DevicePluginOptions options = 4}
# ListAndWatchResponse {repeated Device devices = 1}; Device {string ID = 1; string health = 2; TopologyInfo topology = 3}
# AllocateRequest {repeated ContainerAllocateRequest container_requests = 1}; ContainerAllocateRequest {repeated string devices_ids = 1}
# AllocateResponse {repeated ContainerAllocateResponse container_responses = 1}
# ContainerAllocateResponse {map<string, string> envs = 1; mounts = 2; devices = 3; annotations = 4; cdi_devices = 5}
# PreferredAllocationRequest {repeated ContainerPreferredAllocationRequest container_requests = 1}
# ContainerPreferredAllocationRequest {repeated string available_deviceIDs = 1; must_include_deviceIDs = 2; int32 allocation_size = 3}
# PreferredAllocationResponse {repeated ContainerPreferredAllocationResponse container_responses = 1}
# ContainerPreferredAllocationResponse {repeated string deviceIDs = 1}

PLUGIN_OPTIONS = wire.encode_message([(1, False), (2, True)])


def register_request(endpoint, resource):
    return wire.encode_message([(1, API_VERSION), (2, endpoint), (3, resource), (4, PLUGIN_OPTIONS)])


def list_and_watch_response(device_ids):
    return wire.encode_message([(1, [wire.encode_message([(1, device_id), (2, 'Healthy')]) for device_id in device_ids])])


def allocate_response(container_device_ids):
    containers = []
    for device_ids in container_device_ids:
        # The devices themselves, once each: a shared replica's id less its '::<n>'.
        visible = []
        for device_id in device_ids:
            bare = device_id.split(REPLICA_SEPARATOR, 1)[0]
            if bare not in visible:
                visible.append(bare)
        env = wire.encode_message([(1, VISIBLE_DEVICES_ENV), (2, ','.join(visible))])  # one map entry
        containers.append(wire.encode_message([(1, [env])]))
    return wire.encode_message([(1, containers)])


def preferred_allocation(available, must_include, size):
    """must_include first, then the available ids in their order, ``size`` in all."""
    chosen = list(must_include)
    chosen.extend(device_id for device_id in available if device_id not in chosen)
    return chosen[:max(size, len(must_include))]


# ---- one resource's gRPC server --------------------------------------------------------------------

class ResourcePlugin(object):
    """The DevicePlugin service of one resource on its own unix socket."""

    def __init__(self, resource, device_ids, plugin_dir, on_allocate):
        import grpc

        self._grpc = grpc
        self.resource = resource
        self.device_ids = list(device_ids)
        self.endpoint = 'gpufleet-%s.sock' % resource.split('/', 1)[1]
        self.path = os.path.join(plugin_dir, self.endpoint)
        self._on_allocate = on_allocate
        self._stopping = threading.Event()
        self._server = None

    def start(self):
        grpc = self._grpc
        if os.path.lexists(self.path):
            os.unlink(self.path)
        handlers = {
            'GetDevicePluginOptions': grpc.unary_unary_rpc_method_handler(lambda request, context: PLUGIN_OPTIONS),
            'ListAndWatch': grpc.unary_stream_rpc_method_handler(self._list_and_watch),
            'GetPreferredAllocation': grpc.unary_unary_rpc_method_handler(self._preferred_allocation),
            'Allocate': grpc.unary_unary_rpc_method_handler(self._allocate),
            'PreStartContainer': grpc.unary_unary_rpc_method_handler(lambda request, context: b''),
        }
        # ListAndWatch holds one worker for as long as the kubelet watches.
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler('v1beta1.DevicePlugin', handlers),))
        self._server.add_insecure_port('unix:' + self.path)
        self._server.start()

    def register(self, kubelet_socket, timeout=5.0):
        channel = self._grpc.insecure_channel('unix:' + kubelet_socket, options=[('grpc.enable_http_proxy', 0)])
        try:
            channel.unary_unary('/v1beta1.Registration/Register')(register_request(self.endpoint, self.resource),
                                                                  timeout=timeout)
        finally:
            channel.close()

    def stop(self):
        self._stopping.set()
        if self._server is not None:
            self._server.stop(None).wait(5)
            self._server = None
        if os.path.lexists(self.path):
            os.unlink(self.path)

    def socket_present(self):
        return os.path.exists(self.path)

    def _list_and_watch(self, request, context):
        yield list_and_watch_response(self.device_ids)
        # The devices of one enumeration never change: a new enumeration is a new server.
        while not self._stopping.wait(0.5):
            if not context.is_active():
                return

    def _allocate(self, request, context):
        per_container = []
        for container in wire.field_messages(wire.decode_message(request), 1):
            device_ids = wire.field_strings(container, 1)
            unknown = sorted(set(device_ids) - set(self.device_ids))
            if unknown:
                context.abort(self._grpc.StatusCode.INVALID_ARGUMENT,
                              'unknown %s devices: %s' % (self.resource, ', '.join(unknown)))
            per_container.append(device_ids)
            self._on_allocate(self.resource, device_ids)
        return allocate_response(per_container)

    def _preferred_allocation(self, request, context):
        answers = []
        for container in wire.field_messages(wire.decode_message(request), 1):
            chosen = preferred_allocation(wire.field_strings(container, 1), wire.field_strings(container, 2),
                                          wire.field_int(container, 3))
            answers.append(wire.encode_message([(1, chosen)]))
        return wire.encode_message([(1, answers)])


# ---- the node's label ------------------------------------------------------------------------------

class NodeLabels(object):
    """Reads the node's labels from the API server (standard library HTTP, no proxy)."""

    def __init__(self, server, node_name, ca_file, token_file):
        self.url = '%s/api/v1/nodes/%s' % (server.rstrip('/'), node_name)
        self.token_file = token_file
        context = ssl.create_default_context(cafile=ca_file)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                   urllib.request.HTTPSHandler(context=context))

    def read(self):
        """The labels, or None when the API server cannot tell now (logged)."""
        with open(self.token_file) as handle:
            token = handle.read().strip()
        request = urllib.request.Request(self.url, headers={'Authorization': 'Bearer ' + token})
        try:
            with self._opener.open(request, timeout=5) as response:
                return json.load(response)['metadata'].get('labels', {})
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log('cannot read the node from %s: %s' % (self.url, exc))
            return None


# ---- the plugin manager ------------------------------------------------------------------------------

class Manager(object):
    def __init__(self, plugin_dir, labels, status_file, poll, mode_file=None):
        self.plugin_dir = plugin_dir
        self.mode_file = mode_file
        self.mode = dict(DEFAULT_MODE)
        self.served = {}
        self.names = {}
        self.kubelet_socket = os.path.join(plugin_dir, 'kubelet.sock')
        self.labels = labels
        self.status_file = status_file
        self.poll = poll
        self.plugins = []
        self.registered_with = None
        self.state = 'starting'
        self.label = None
        self.registrations = 0
        self.enumerations = 0
        self.allocations = []
        self.wake = threading.Event()
        self.hangup = False
        self.terminate = False
        self._lock = threading.Lock()

    def _kubelet_identity(self):
        try:
            info = os.stat(self.kubelet_socket)
        except OSError:
            return None
        # The change time too: a freed inode number is often handed out again at once.
        return (info.st_dev, info.st_ino, info.st_ctime_ns)

    def write_status(self):
        with self._lock:
            status = {
                'state': self.state,
                'label': self.label,
                'resources': {plugin.resource: plugin.device_ids for plugin in self.plugins},
                'mode': self.mode,
                'registrations': self.registrations,
                'enumerations': self.enumerations,
                'allocations': list(self.allocations),
                'pid': os.getpid(),
            }
        temporary = self.status_file + '.tmp'
        with open(temporary, 'w') as handle:
            json.dump(status, handle, sort_keys=True)
        os.replace(temporary, self.status_file)

    def record_allocation(self, resource, device_ids):
        log('allocated %s: %s' % (resource, ', '.join(device_ids)))
        with self._lock:
            self.allocations.append({'resource': resource, 'device_ids': list(device_ids),
                                     'uuids': [self.names.get(device_id) for device_id in device_ids]})
        self.write_status()

    def stop_plugins(self, why):
        if self.plugins:
            log('stopping %s: %s' % (', '.join(plugin.resource for plugin in self.plugins), why))
        for plugin in self.plugins:
            plugin.stop()
        self.plugins = []
        self.registered_with = None

    def start_plugins(self):
        self.mode = read_mode(self.mode_file)
        resources, self.names = advertised(enumerate_devices(), self.mode, self.served)
        self.served = resources
        self.enumerations += 1
        log('enumerated %s' % json.dumps(resources, sort_keys=True))
        self.plugins = [ResourcePlugin(resource, ids, self.plugin_dir, self.record_allocation)
                        for resource, ids in sorted(resources.items())]
        for plugin in self.plugins:
            plugin.start()

    def register(self):
        identity = self._kubelet_identity()
        if identity is None:
            self.state = 'waiting-for-kubelet'
            return
        try:
            for plugin in self.plugins:
                plugin.register(self.kubelet_socket)
        except Exception as exc:  # grpc.RpcError and socket errors alike: the kubelet may be restarting
            log('registration with %s failed, retrying: %s' % (self.kubelet_socket, exc))
            self.state = 'waiting-for-kubelet'
            return
        self.registrations += 1
        self.registered_with = identity
        self.state = 'serving'
        log('registered %s with the kubelet' % ', '.join(plugin.resource for plugin in self.plugins))

    def step(self):
        labels = self.labels.read()
        if labels is None:
            return  # the API server cannot tell: keep doing what we do
        self.label = labels.get(DEPLOY_LABEL)
        if self.label != 'true':
            self.stop_plugins('node label %s=%s' % (DEPLOY_LABEL, self.label))
            self.state = 'paused'
            return
        if self.hangup:
            self.hangup = False
            self.stop_plugins('SIGHUP: enumerating the GPUs again')
        if not self.plugins:
            self.start_plugins()
        elif self.registered_with is not None and (
                self.registered_with != self._kubelet_identity()
                or not all(plugin.socket_present() for plugin in self.plugins)):
            # A (re)started kubelet deleted our sockets: serve on new ones, register again.
            ids = [(plugin.resource, plugin.device_ids) for plugin in self.plugins]
            self.stop_plugins('the kubelet restarted')
            self.plugins = [ResourcePlugin(resource, device_ids, self.plugin_dir, self.record_allocation)
                            for resource, device_ids in ids]
            for plugin in self.plugins:
                plugin.start()
        if self.registered_with is None:
            self.register()

    def run(self):
        def on_hangup(signum, frame):
            self.hangup = True
            self.wake.set()

        def on_terminate(signum, frame):
            self.terminate = True
            self.wake.set()

        signal.signal(signal.SIGHUP, on_hangup)
        signal.signal(signal.SIGTERM, on_terminate)
        signal.signal(signal.SIGINT, on_terminate)
        log('watching node label %s every %ss; kubelet socket %s' % (DEPLOY_LABEL, self.poll, self.kubelet_socket))
        try:
            while not self.terminate:
                self.step()
                self.write_status()
                self.wake.wait(self.poll)
                self.wake.clear()
        finally:
            self.stop_plugins('terminating')
            if os.path.exists(self.status_file):
                os.unlink(self.status_file)
            log('stopped')


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--list', action='store_true', help='print the resources of the simulated host and exit')
    parser.add_argument('--plugin-dir', help="the kubelet's device-plugins folder (holds kubelet.sock)")
    parser.add_argument('--node-name')
    parser.add_argument('--server', help='API server URL')
    parser.add_argument('--ca-file')
    parser.add_argument('--token-file')
    parser.add_argument('--status-file')
    parser.add_argument('--poll', type=float, default=1.0, help='seconds between two looks at the node label')
    parser.add_argument('--mode-file', help='JSON settings read at each enumeration (device_id_strategy, keep_destroyed, time_slicing)')
    args = parser.parse_args(argv)
    if args.list:
        print(json.dumps(enumerate_resources(), indent=1, sort_keys=True))
        return 0
    missing = [option for option in ('plugin_dir', 'node_name', 'server', 'ca_file', 'token_file', 'status_file')
               if getattr(args, option) is None]
    if missing:
        parser.error('missing %s' % ', '.join('--' + option.replace('_', '-') for option in missing))
    if not os.path.isdir(args.plugin_dir):
        parser.error('--plugin-dir %s is not a folder' % args.plugin_dir)
    labels = NodeLabels(args.server, args.node_name, args.ca_file, args.token_file)
    Manager(args.plugin_dir, labels, args.status_file, args.poll, args.mode_file).run()
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))

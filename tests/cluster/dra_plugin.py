# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A test DRA kubelet plugin for the node of tests/cluster/node.sh: the part of NVIDIA's DRA driver
(driver gpu.nvidia.com, NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin) that the kubelet talks to, for
the MIG devices of a simulated GPU host.

  dra_plugin.py --registry-dir DIR --plugin-dir DIR --node-name NAME --server URL --ca-file CA
                --token-file FILE --status-file FILE
  dra_plugin.py --list        print the ResourceSlice of the simulated host as JSON and exit
  dra_plugin.py --claims-listed SOCKET
                              print the DRA claims' devices the kubelet's pod-resources List names (as
                              plugins/module_utils/k8s/_pod_resources.py reads them) as JSON and exit

What it does, as the real driver does it:
- publishes one ResourceSlice for the node (driver gpu.nvidia.com, pool = the node's name): one device per MIG
  device whose compute instance is full-size, named 'gpu-<minor>-mig-<profile without dots>-<GI profile
  id>-<placement start>' (the driver's MigSpecTuple.ToCanonicalName), with the attributes type=mig, uuid,
  parentUUID, profile, minor and the capacity memory; the GPUs come from pynvml and the NVML simulator
  (GPUFLEET_MIG_SIMULATOR) as device_plugin.py reads them;
- registers with the kubelet's plugin watcher: a socket in the kubelet's plugins_registry folder
  (<--root-dir>/plugins_registry, pkg/kubelet/pluginmanager) serving the pluginregistration v1 Registration
  service (staging/src/k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.proto: GetInfo answers type
  "DRAPlugin", the driver name, the DRA socket and the gRPC services it serves; NotifyRegistrationStatus says
  whether the kubelet took it);
- serves the DRA kubelet API v1 (staging/src/k8s.io/kubelet/pkg/apis/dra/v1/api.proto, service
  k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin; "v1.DRAPlugin" is what the 1.34 kubelet accepts first,
  pkg/kubelet/cm/dra/plugin/dra_plugin.go servicesSupportedByKubelet): NodePrepareResources reads each claim
  from the API server (the kubelet sends only its namespace, name and UID) and answers the devices the
  scheduler allocated to it from this driver's pool, each with the driver's CDI device
  'k8s.gpu.nvidia.com/device=<name>' (cdi.go); NodeUnprepareResources forgets the claim.

The node's containerd (1.6) knows no CDI, so the CDI ids change nothing in the container: what matters here is
that the kubelet records the prepared devices and lists them in pod-resources (dynamic_resources), which is
what gpufleet.mig reads. The kubelet deletes the node's ResourceSlices when it starts and those of a driver
whose plugin stays away (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go wipeResourceSlices): the slice is
published once, after the registration (the devices of a later layout are not published: the check needs none).
SIGTERM or SIGINT: delete the slice, remove the sockets and the status file, exit 0.

The status file (JSON, replaced atomically) says {"state": "starting" | "registered" (slice not yet published) |
"serving" | "rejected",
"registration": {"registered", "error"} as the kubelet notified it, "devices": [device names published],
"generation", "prepared": {claim uid: {"claim": "namespace/name", "devices": [...]}}, "prepare_calls",
"unprepare_calls", "pid"}.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
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
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import device_plugin  # noqa: E402  (beside this file: the simulated GPUs and the protobuf codec)

wire = device_plugin.wire
MigProfile = device_plugin.MigProfile

DRIVER = 'gpu.nvidia.com'
# pluginregistration v1 (constants.go): the plugin type of a DRA driver's kubelet plugin.
PLUGIN_TYPE = 'DRAPlugin'
# dra v1 (staging/src/k8s.io/kubelet/pkg/apis/dra/v1/types.go DRAPluginService): the name to list among the
# supported versions; the gRPC service itself is named after the proto package.
DRA_SERVICE_VERSION = 'v1.DRAPlugin'
DRA_SERVICE = 'k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin'
REGISTRATION_SERVICE = 'pluginregistration.Registration'
CDI_DEVICE_KIND = 'k8s.gpu.nvidia.com/device'
RESOURCE_API = '/apis/resource.k8s.io/v1'


def log(message):
    sys.stderr.write('%s dra-plugin[%d]: %s\n' % (time.strftime('%H:%M:%S'), os.getpid(), message))
    sys.stderr.flush()


# ---- the devices and their slice -----------------------------------------------------------------------

def device_name(minor, profile_name, profile_id, start):
    """NVIDIA's DRA driver's name of a MIG device: 'gpu-<minor>-mig-<profile without dots>-<GI profile id>-<start>'
    (MigSpecTuple.ToCanonicalName; '+' of a profile such as 1g.10gb+me becomes '-': a device name is a DNS label)."""
    return 'gpu-%d-mig-%s-%d-%d' % (minor, profile_name.replace('.', '').replace('+', '-'), profile_id, start)


def enumerate_mig_devices(state_path=None):
    """The host's MIG devices with a full-size compute instance: [{'name', 'uuid', 'parent_uuid', 'profile',
    'profile_id', 'start', 'minor', 'memory_mib'}], from pynvml (the simulated host when ``state_path`` or
    GPUFLEET_MIG_SIMULATOR names its state file). A GPU whose minor number NVML cannot tell has no DRA name:
    an error, as the driver would not start."""
    import pynvml

    state_path = state_path or os.environ.get(device_plugin.SIMULATOR_ENV)
    if state_path:
        device_plugin.simulator_on_path().install(pynvml, state_path)
    pynvml.nvmlInit()
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            gpu = pynvml.nvmlDeviceGetHandleByIndex(index)
            if pynvml.nvmlDeviceGetMigMode(gpu)[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
                continue
            minor = pynvml.nvmlDeviceGetMinorNumber(gpu)
            parent_uuid = device_plugin._text(pynvml.nvmlDeviceGetUUID(gpu))
            for mig_index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu)):
                try:
                    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, mig_index)
                except pynvml.NVMLError_NotFound:
                    continue
                profile = MigProfile.parse(device_plugin._text(pynvml.nvmlDeviceGetName(mig)).split(' MIG ', 1)[1])
                if profile.is_compute_instance_profile:
                    continue  # as device_plugin.py: full-size compute instances only
                gi = pynvml.nvmlDeviceGetGpuInstanceById(gpu, pynvml.nvmlDeviceGetGpuInstanceId(mig))
                info = pynvml.nvmlGpuInstanceGetInfo(gi)
                devices.append({
                    'name': device_name(minor, profile.name, info.profileId, info.placement.start),
                    'uuid': device_plugin._text(pynvml.nvmlDeviceGetUUID(mig)), 'parent_uuid': parent_uuid,
                    'profile': profile.name, 'profile_id': info.profileId, 'start': info.placement.start,
                    'minor': minor, 'memory_mib': pynvml.nvmlDeviceGetMemoryInfo(mig).total // (1024 * 1024)})
        return devices
    finally:
        pynvml.nvmlShutdown()


def slice_name(node_name):
    return '%s-%s' % (node_name, DRIVER)


def resource_slice(node_name, devices, generation):
    """The ResourceSlice (resource.k8s.io/v1) of ``devices`` on ``node_name``: the node's one pool, named after it."""
    return {
        'apiVersion': 'resource.k8s.io/v1', 'kind': 'ResourceSlice',
        'metadata': {'name': slice_name(node_name)},
        'spec': {
            'driver': DRIVER, 'nodeName': node_name,
            'pool': {'name': node_name, 'generation': generation, 'resourceSliceCount': 1},
            'devices': [{
                'name': device['name'],
                'attributes': {
                    'type': {'string': 'mig'}, 'uuid': {'string': device['uuid']},
                    'parentUUID': {'string': device['parent_uuid']}, 'profile': {'string': device['profile']},
                    'minor': {'int': device['minor']}},
                'capacity': {'memory': {'value': '%dMi' % device['memory_mib']}},
            } for device in devices]}}


# ---- the kubelet's messages ----------------------------------------------------------------------------

def plugin_info(dra_socket):
    """PluginInfo {string type = 1; string name = 2; string endpoint = 3; repeated string supported_versions = 4}."""
    return wire.encode_message([(1, PLUGIN_TYPE), (2, DRIVER), (3, dra_socket), (4, [DRA_SERVICE_VERSION])])


def parse_registration_status(data):
    """RegistrationStatus {bool plugin_registered = 1; string error = 2} -> {'registered', 'error'}."""
    fields = wire.decode_message(data)
    return {'registered': wire.field_bool(fields, 1), 'error': wire.field_string(fields, 2)}


def parse_claims(data):
    """NodePrepareResourcesRequest / NodeUnprepareResourcesRequest {repeated Claim claims = 1}, Claim {string
    namespace = 1; string uid = 2; string name = 3} -> [{'namespace', 'uid', 'name'}]."""
    return [{'namespace': wire.field_string(claim, 1), 'uid': wire.field_string(claim, 2), 'name': wire.field_string(claim, 3)}
            for claim in wire.field_messages(wire.decode_message(data), 1)]


def _map_entry(key, value):
    # A proto3 map<string, M> is a repeated entry message {string key = 1; M value = 2}.
    return wire.encode_message([(1, key), (2, value)])


def encode_prepare_response(answers):
    """NodePrepareResourcesResponse {map<string, NodePrepareResourceResponse> claims = 1} from ``{claim uid:
    {'devices': [{'requests', 'pool', 'device', 'cdi_devices'}], 'error': str}}``; NodePrepareResourceResponse
    {repeated Device devices = 1; string error = 2}, Device {repeated string request_names = 1; string
    pool_name = 2; string device_name = 3; repeated string cdi_device_ids = 4}."""
    entries = []
    for uid, answer in sorted(answers.items()):
        devices = [wire.encode_message([(1, list(device['requests'])), (2, device['pool']), (3, device['device']),
                                        (4, list(device['cdi_devices']))]) for device in answer.get('devices', [])]
        fields = [(1, devices)]
        if answer.get('error'):
            fields.append((2, answer['error']))
        entries.append(_map_entry(uid, wire.encode_message(fields)))
    return wire.encode_message([(1, entries)])


def encode_unprepare_response(errors):
    """NodeUnprepareResourcesResponse {map<string, NodeUnprepareResourceResponse> claims = 1} from ``{claim uid:
    error or ''}``; every claim of the request must have its entry (api.proto)."""
    return wire.encode_message([(1, [_map_entry(uid, wire.encode_message([(1, error)] if error else []))
                                     for uid, error in sorted(errors.items())])])


def prepare_answer(claim_ref, claim, node_name, published):
    """What NodePrepareResources answers for one claim: ``{'devices': [...]}`` or ``{'error': why}``.

    ``claim_ref`` is the kubelet's {'namespace', 'uid', 'name'}, ``claim`` the ResourceClaim as the API server
    has it (None: not found), ``published`` the device names of this node's slice. The devices are the
    allocation's results of this driver in this node's pool, each with its request and CDI device."""
    where = '%s/%s' % (claim_ref['namespace'], claim_ref['name'])
    if claim is None:
        return {'error': 'ResourceClaim %s not found' % where}
    if claim.get('metadata', {}).get('uid') != claim_ref['uid']:
        return {'error': 'ResourceClaim %s has UID %s, not %s' % (where, claim.get('metadata', {}).get('uid'), claim_ref['uid'])}
    results = (((claim.get('status') or {}).get('allocation') or {}).get('devices') or {}).get('results') or []
    ours = [result for result in results if result.get('driver') == DRIVER]
    if not ours:
        return {'error': 'ResourceClaim %s has no device of driver %s allocated' % (where, DRIVER)}
    devices = []
    for result in ours:
        if result.get('pool') != node_name or result.get('device') not in published:
            return {'error': 'ResourceClaim %s is allocated device %s of pool %s, which node %s does not publish'
                             % (where, result.get('device'), result.get('pool'), node_name)}
        devices.append({'requests': [result['request']], 'pool': result['pool'], 'device': result['device'],
                        'cdi_devices': ['%s=%s' % (CDI_DEVICE_KIND, result['device'])]})
    return {'devices': devices}


# ---- the API server ------------------------------------------------------------------------------------

class Api(object):
    """JSON requests to the API server (standard library HTTP, no proxy), as device_plugin.NodeLabels reads."""

    def __init__(self, server, ca_file, token_file):
        self.server = server.rstrip('/')
        self.token_file = token_file
        context = ssl.create_default_context(cafile=ca_file)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))

    def call(self, method, path, body=None):
        """The answer's JSON, or None for 404."""
        with open(self.token_file) as handle:
            token = handle.read().strip()
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method,
                                         headers={'Authorization': 'Bearer ' + token, 'Content-Type': 'application/json'})
        try:
            with self._opener.open(request, timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise


# ---- the plugin ----------------------------------------------------------------------------------------

class Plugin(object):
    def __init__(self, api, node_name, registry_dir, plugin_dir, status_file):
        import grpc

        self._grpc = grpc
        self.api = api
        self.node_name = node_name
        self.registration_socket = os.path.join(registry_dir, '%s-reg.sock' % DRIVER)
        self.dra_socket = os.path.join(plugin_dir, 'dra.sock')
        self.status_file = status_file
        self.devices = []
        self.generation = 0
        self.registration = None
        self.prepared = {}
        self.prepare_calls = 0
        self.unprepare_calls = 0
        self.registered = threading.Event()
        self.wake = threading.Event()
        self.terminate = False
        self._lock = threading.Lock()
        self._servers = []

    def write_status(self):
        with self._lock:
            state = 'starting'
            if self.registration is not None:
                if not self.registration['registered']:
                    state = 'rejected'
                else:
                    state = 'serving' if self.generation else 'registered'
            status = {'state': state, 'registration': self.registration, 'devices': [d['name'] for d in self.devices],
                      'generation': self.generation, 'prepared': dict(self.prepared), 'prepare_calls': self.prepare_calls,
                      'unprepare_calls': self.unprepare_calls, 'pid': os.getpid()}
        temporary = self.status_file + '.tmp'
        with open(temporary, 'w') as handle:
            json.dump(status, handle, sort_keys=True)
        os.replace(temporary, self.status_file)

    # -- gRPC handlers
    def _get_info(self, request, context):
        return plugin_info(self.dra_socket)

    def _notify(self, request, context):
        status = parse_registration_status(request)
        log('the kubelet %s' % ('registered the plugin' if status['registered'] else 'refused the plugin: %s' % status['error']))
        with self._lock:
            self.registration = status
        self.registered.set()
        self.wake.set()
        return b''

    def _prepare(self, request, context):
        published = set(d['name'] for d in self.devices)
        answers = {}
        for ref in parse_claims(request):
            path = '%s/namespaces/%s/resourceclaims/%s' % (RESOURCE_API, ref['namespace'], ref['name'])
            try:
                answer = prepare_answer(ref, self.api.call('GET', path), self.node_name, published)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                answer = {'error': 'cannot read ResourceClaim %s/%s: %s' % (ref['namespace'], ref['name'], exc)}
            log('prepare %s/%s (%s): %s' % (ref['namespace'], ref['name'], ref['uid'], json.dumps(answer, sort_keys=True)))
            answers[ref['uid']] = answer
            if 'devices' in answer:
                with self._lock:
                    self.prepared[ref['uid']] = {'claim': '%s/%s' % (ref['namespace'], ref['name']),
                                                 'devices': [d['device'] for d in answer['devices']]}
        with self._lock:
            self.prepare_calls += 1
        self.write_status()
        return encode_prepare_response(answers)

    def _unprepare(self, request, context):
        refs = parse_claims(request)
        with self._lock:
            for ref in refs:
                self.prepared.pop(ref['uid'], None)
            self.unprepare_calls += 1
        log('unprepare %s' % ', '.join('%s/%s' % (ref['namespace'], ref['name']) for ref in refs))
        self.write_status()
        return encode_unprepare_response(dict((ref['uid'], '') for ref in refs))

    def _serve(self, path, service, handlers):
        grpc = self._grpc
        if os.path.lexists(path):
            os.unlink(path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            service, dict((name, grpc.unary_unary_rpc_method_handler(handler)) for name, handler in handlers.items())),))
        server.add_insecure_port('unix:' + path)
        server.start()
        self._servers.append((server, path))

    # -- the slice
    def publish(self):
        self.devices = enumerate_mig_devices()
        self.generation += 1
        body = resource_slice(self.node_name, self.devices, self.generation)
        path = '%s/resourceslices/%s' % (RESOURCE_API, slice_name(self.node_name))
        current = self.api.call('GET', path)
        if current is None:
            self.api.call('POST', '%s/resourceslices' % RESOURCE_API, body)
        else:
            body['metadata']['resourceVersion'] = current['metadata']['resourceVersion']
            self.api.call('PUT', path, body)
        log('published %s generation %d: %s' % (slice_name(self.node_name), self.generation,
                                                ', '.join(d['name'] for d in self.devices)))

    def unpublish(self):
        try:
            self.api.call('DELETE', '%s/resourceslices/%s' % (RESOURCE_API, slice_name(self.node_name)))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log('cannot delete the slice: %s' % exc)

    def run(self):
        def on_terminate(signum, frame):
            self.terminate = True
            self.wake.set()

        signal.signal(signal.SIGTERM, on_terminate)
        signal.signal(signal.SIGINT, on_terminate)
        try:
            # The DRA service first: the kubelet connects to it as soon as it has the registration.
            self._serve(self.dra_socket, DRA_SERVICE,
                        {'NodePrepareResources': self._prepare, 'NodeUnprepareResources': self._unprepare})
            self._serve(self.registration_socket, REGISTRATION_SERVICE,
                        {'GetInfo': self._get_info, 'NotifyRegistrationStatus': self._notify})
            log('serving %s on %s, registration on %s' % (DRA_SERVICE, self.dra_socket, self.registration_socket))
            self.write_status()
            while not self.terminate:
                if self.registered.is_set() and self.registration['registered'] and not self.generation:
                    try:
                        self.publish()
                    except (urllib.error.URLError, OSError, ValueError) as exc:
                        log('publishing the slice failed, retrying: %s' % exc)
                self.write_status()
                self.wake.wait(1.0)
                self.wake.clear()
        finally:
            if self.generation:
                self.unpublish()
            for server, path in self._servers:
                server.stop(None).wait(5)
                if os.path.lexists(path):
                    os.unlink(path)
            if os.path.exists(self.status_file):
                os.unlink(self.status_file)
            log('stopped')


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--list', action='store_true', help='print the ResourceSlice of the simulated host and exit')
    parser.add_argument('--claims-listed', metavar='SOCKET', help="print the claims' devices the kubelet's pod-resources List names")
    parser.add_argument('--registry-dir', help="the kubelet's plugins_registry folder")
    parser.add_argument('--plugin-dir', help='the folder of the DRA socket')
    parser.add_argument('--node-name')
    parser.add_argument('--server', help='API server URL')
    parser.add_argument('--ca-file')
    parser.add_argument('--token-file')
    parser.add_argument('--status-file')
    args = parser.parse_args(argv)
    if args.list:
        print(json.dumps(resource_slice(args.node_name or 'node', enumerate_mig_devices(), 1), indent=1, sort_keys=True))
        return 0
    if args.claims_listed:
        listed = device_plugin.pod_resources.list_pod_devices(args.claims_listed)
        print(json.dumps([entry for entry in listed if wire.is_claim(entry)], indent=1, sort_keys=True))
        return 0
    missing = [option for option in ('registry_dir', 'plugin_dir', 'node_name', 'server', 'ca_file', 'token_file', 'status_file')
               if getattr(args, option) is None]
    if missing:
        parser.error('missing %s' % ', '.join('--' + option.replace('_', '-') for option in missing))
    for folder in (args.registry_dir, args.plugin_dir):
        if not os.path.isdir(folder):
            os.makedirs(folder)
    Plugin(Api(args.server, args.ca_file, args.token_file), args.node_name, args.registry_dir, args.plugin_dir,
           args.status_file).run()
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pod-resources client: its protobuf codec, a real gRPC server on a unix socket, the error
paths, and processes mapped to pods through fake /proc trees."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import shutil
import socket
import sys
import tempfile
import threading
from concurrent import futures

import grpc
import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _pod_allocations as pr_allocations
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _pod_cgroups as pr_cgroups
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _pod_resources as pr
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _pod_resources_wire as pr_wire
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Host

MIG_A = 'MIG-4f8a6c2e-0b1d-5e7f-9a3c-1d2e3f4a5b6c'
MIG_B = 'MIG-9e8d7c6b-5a4f-5e3d-8c2b-1a0f9e8d7c6b'
MIG_C = 'MIG-0a1b2c3d-4e5f-5a6b-9c8d-7e6f5a4b3c2d'


# ---- codec -------------------------------------------------------------------------------------

@pytest.mark.parametrize('value, wire', [
    (0, b'\x00'),
    (1, b'\x01'),
    (127, b'\x7f'),
    (128, b'\x80\x01'),
    (300, b'\xac\x02'),
    (2 ** 63 - 1, b'\xff\xff\xff\xff\xff\xff\xff\xff\x7f'),
    (2 ** 64 - 1, b'\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01'),
])
def test_varint_known_encodings_round_trip(value, wire):
    assert pr_wire.encode_varint(value) == wire
    assert pr_wire.decode_varint(wire + b'rest') == (value, len(wire))


def test_negative_varint_is_int64_twos_complement():
    wire = pr_wire.encode_varint(-1)
    assert wire == b'\xff' * 9 + b'\x01'
    value, end = pr_wire.decode_varint(wire)
    assert end == 10
    assert pr_wire.as_int64(value) == -1
    assert pr_wire.as_int64(pr_wire.decode_varint(pr_wire.encode_varint(-(2 ** 63)))[0]) == -(2 ** 63)


@pytest.mark.parametrize('bad', [True, 1.5, '1', None])
def test_varint_rejects_non_ints(bad):
    with pytest.raises(TypeError, match='varint value must be an int'):
        pr_wire.encode_varint(bad)


def test_varint_rejects_values_over_64_bits():
    with pytest.raises(ValueError, match='does not fit in 64 bits'):
        pr_wire.encode_varint(2 ** 64)


@pytest.mark.parametrize('wire, message', [
    (b'', 'truncated varint at byte 0'),
    (b'\x80\x80', 'truncated varint'),
    (b'\xff' * 11, 'longer than 10 bytes'),
    (b'\xff' * 9 + b'\x7f', 'longer than 64 bits'),
])
def test_varint_decoding_errors(wire, message):
    with pytest.raises(pr_wire.ProtobufError, match=message):
        pr_wire.decode_varint(wire)


def test_message_bytes_match_the_protobuf_wire_format():
    # ContainerDevices{resource_name: "a", device_ids: ["x", "yz"]}, as any protobuf library writes it.
    assert pr_wire.encode_container_devices('a', ['x', 'yz']) == b'\x0a\x01a\x12\x01x\x12\x02yz'
    # Field 3 as a varint: key (3 << 3 | 0) = 0x18.
    assert pr_wire.encode_message([(3, 150)]) == b'\x18\x96\x01'
    assert pr_wire.encode_message([(1, True), (2, False)]) == b'\x08\x01\x10\x00'


def test_message_round_trip_with_nesting_repetition_and_unicode():
    inner = pr_wire.encode_message([(1, 'nvidia.com/mig-1g.10gb'), (2, [MIG_A, MIG_B])])
    outer = pr_wire.encode_message([(1, 'pod-é'), (2, 7), (3, [inner, inner]), (4, b'\x00\xff'), (536870911, 'max')])
    fields = pr_wire.decode_message(outer)
    assert pr_wire.field_string(fields, 1) == 'pod-é'
    assert pr_wire.field_int(fields, 2) == 7
    assert fields[4] == [b'\x00\xff']
    assert pr_wire.field_string(fields, 536870911) == 'max'
    nested = pr_wire.field_messages(fields, 3)
    assert len(nested) == 2
    assert all(pr_wire.field_strings(n, 2) == [MIG_A, MIG_B] for n in nested)
    assert pr_wire.field_string(fields, 99) == '' and pr_wire.field_int(fields, 99) == 0 and pr_wire.field_messages(fields, 99) == []


def test_decoding_keeps_fixed_width_fields_raw_and_the_last_singular_value_wins():
    # field 1 fixed64, field 2 fixed32, field 3 twice as a varint.
    data = b'\x09' + b'\x01' * 8 + b'\x15' + b'\x02' * 4 + b'\x18\x05\x18\x06'
    fields = pr_wire.decode_message(data)
    assert fields[1] == [b'\x01' * 8]
    assert fields[2] == [b'\x02' * 4]
    assert pr_wire.field_int(fields, 3) == 6
    assert pr_wire.field_bool(fields, 3) is True


@pytest.mark.parametrize('data, message', [
    (b'\x0a\x05abc', 'field 1: 5 bytes announced, 3 left'),
    (b'\x09\x01\x02', 'truncated fixed64'),
    (b'\x0b', 'unsupported wire type 3'),
    (b'\x00\x01', 'field number 0'),
    (b'\x08', 'truncated varint'),
])
def test_malformed_messages_are_rejected(data, message):
    with pytest.raises(pr_wire.ProtobufError, match=message):
        pr_wire.decode_message(data)


def test_field_type_mismatches_are_reported():
    fields = pr_wire.decode_message(pr_wire.encode_message([(1, 5), (2, b'\xff\xfe')]))
    with pytest.raises(pr_wire.ProtobufError, match='field 1 is not a message'):
        pr_wire.field_messages(fields, 1)
    with pytest.raises(pr_wire.ProtobufError, match='field 2 is not a UTF-8 string'):
        pr_wire.field_strings(fields, 2)
    with pytest.raises(pr_wire.ProtobufError, match='field 2 is not a varint'):
        pr_wire.field_int(fields, 2)


@pytest.mark.parametrize('fields, error', [
    ([(0, 1)], 'invalid protobuf field number 0'),
    ([(2 ** 29, 1)], 'invalid protobuf field number'),
    ([(1, 1.5)], 'field 1: cannot encode 1.5'),
])
def test_encoding_rejects_bad_fields(fields, error):
    with pytest.raises((ValueError, TypeError), match=error):
        pr_wire.encode_message(fields)


def _kubelet_style_list_response():
    """A List answer shaped as the kubelet sends it: one ContainerDevices per device, each with its
    NUMA topology, plus cpu ids (packed) and memory that the client must skip."""
    topology = pr_wire.encode_message([(1, [pr_wire.encode_message([(1, 0)])])])

    def device(resource, device_id):
        return pr_wire.encode_message([(1, resource), (2, [device_id]), (3, topology)])

    memory = pr_wire.encode_message([(1, 'memory'), (2, 1 << 30), (3, topology)])
    packed_cpus = pr_wire.encode_varint(2) + pr_wire.encode_varint(3)
    train = pr_wire.encode_message([
        (1, 'train'),
        (2, [device('nvidia.com/mig-1g.10gb', MIG_A), device('nvidia.com/mig-1g.10gb', MIG_B),
             device('nvidia.com/mig-3g.40gb', MIG_C)]),
        (3, packed_cpus),
        (4, memory),
    ])
    sidecar = pr_wire.encode_message([(1, 'sidecar')])
    pods = [
        pr_wire.encode_message([(1, 'trainer-0'), (2, 'ml'), (3, [train, sidecar])]),
        pr_wire.encode_message([(1, 'web'), (2, 'default'), (3, [pr_wire.encode_message([(1, 'nginx'), (3, packed_cpus)])])]),
    ]
    return pr_wire.encode_message([(1, pods)])


def test_list_response_merges_per_device_entries_and_skips_cpu_and_memory():
    assert pr_wire.parse_list_response(_kubelet_style_list_response()) == [
        {'namespace': 'ml', 'pod': 'trainer-0', 'container': 'train', 'resource': 'nvidia.com/mig-1g.10gb',
         'device_ids': [MIG_A, MIG_B]},
        {'namespace': 'ml', 'pod': 'trainer-0', 'container': 'train', 'resource': 'nvidia.com/mig-3g.40gb',
         'device_ids': [MIG_C]},
    ]


def test_list_response_encoder_is_the_inverse_of_the_parser():
    allocations = [{'namespace': 'ml', 'pod': 'p', 'containers': [
        {'name': 'a', 'devices': {'nvidia.com/mig-1g.10gb': ['0:1', '0:2'], 'nvidia.com/gpu': ['GPU-1']}},
        {'name': 'b', 'devices': {}}]}]
    assert pr_wire.parse_list_response(pr_wire.encode_list_response(allocations)) == [
        {'namespace': 'ml', 'pod': 'p', 'container': 'a', 'resource': 'nvidia.com/gpu', 'device_ids': ['GPU-1']},
        {'namespace': 'ml', 'pod': 'p', 'container': 'a', 'resource': 'nvidia.com/mig-1g.10gb',
         'device_ids': ['0:1', '0:2']},
    ]
    assert pr_wire.parse_list_response(pr_wire.encode_list_response([])) == []


def test_allocatable_response_round_trip_and_merge():
    devices = {'nvidia.com/mig-1g.10gb': [MIG_A, MIG_B], 'nvidia.com/mig-3g.40gb': [MIG_C]}
    assert pr_wire.parse_allocatable_response(pr_wire.encode_allocatable_response(devices)) == devices
    # One entry per device, as the kubelet sends them, plus cpu ids (field 2): merged, cpus ignored.
    split = pr_wire.encode_message([(1, [pr_wire.encode_container_devices('r', ['1']), pr_wire.encode_container_devices('r', ['2']),
                                    pr_wire.encode_container_devices('r', ['1'])]), (2, pr_wire.encode_varint(4))])
    assert pr_wire.parse_allocatable_response(split) == {'r': ['1', '2']}


# ---- a real gRPC server on a unix socket -------------------------------------------------------

class FakeKubelet(object):
    """A gRPC server speaking PodResourcesLister v1 on a unix socket, answering with the module's encoder."""

    def __init__(self, directory, list_answer=b'', allocatable_answer=None, hold=False, on_call=None):
        self.path = os.path.join(directory, 'kubelet.sock')
        self.calls = []
        # on_call(method name): run as each call arrives, e.g. to see what the client holds meanwhile.
        self.on_call = on_call or (lambda method: None)
        self.list_answer = list_answer
        self.allocatable_answer = allocatable_answer
        # hold: List answers only once stop() releases it (a kubelet that hangs).
        self.released = threading.Event()
        if not hold:
            self.released.set()
        self.answered = False
        handlers = {'List': grpc.unary_unary_rpc_method_handler(self._list)}
        if allocatable_answer is not None:
            handlers['GetAllocatableResources'] = grpc.unary_unary_rpc_method_handler(self._allocatable)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler('v1.PodResourcesLister', handlers),))
        self.server.add_insecure_port('unix:' + self.path)
        self.server.start()

    def _list(self, request, context):
        self.calls.append(('List', request))
        self.on_call('List')
        self.released.wait(60)
        self.answered = True
        return self.list_answer

    def _allocatable(self, request, context):
        self.calls.append(('GetAllocatableResources', request))
        self.on_call('GetAllocatableResources')
        return self.allocatable_answer

    def stop(self):
        self.released.set()
        self.server.stop(None).wait()


@pytest.fixture
def socket_dir():
    # Short: a unix socket path must fit in 108 bytes, which pytest's tmp_path may not.
    directory = tempfile.mkdtemp(prefix='podres-')
    yield directory
    shutil.rmtree(directory)


@pytest.fixture
def kubelet(socket_dir):
    started = []

    def start(**kwargs):
        server = FakeKubelet(socket_dir, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_list_pod_devices_against_a_real_grpc_server(kubelet):
    server = kubelet(list_answer=_kubelet_style_list_response())
    devices = pr.list_pod_devices(server.path, timeout=5)
    assert [(d['pod'], d['resource'], d['device_ids']) for d in devices] == [
        ('trainer-0', 'nvidia.com/mig-1g.10gb', [MIG_A, MIG_B]), ('trainer-0', 'nvidia.com/mig-3g.40gb', [MIG_C])]
    # The request is an empty ListPodResourcesRequest.
    assert server.calls == [('List', b'')]


def test_allocatable_devices_against_a_real_grpc_server(kubelet):
    devices = {'nvidia.com/mig-1g.10gb': [MIG_A, MIG_B, MIG_C]}
    server = kubelet(allocatable_answer=pr_wire.encode_allocatable_response(devices))
    assert pr.allocatable_devices(server.path) == devices
    assert server.calls == [('GetAllocatableResources', b'')]


def test_an_idle_node_lists_nothing(kubelet):
    server = kubelet(list_answer=pr_wire.encode_list_response([]), allocatable_answer=b'')
    assert pr.list_pod_devices(server.path) == []
    assert pr.allocatable_devices(server.path) == {}


def test_relative_socket_paths_work(kubelet, socket_dir, monkeypatch):
    kubelet(list_answer=_kubelet_style_list_response())
    monkeypatch.chdir(socket_dir)
    assert len(pr.list_pod_devices('kubelet.sock')) == 2


def test_a_kubelet_without_get_allocatable_is_explained(kubelet):
    server = kubelet(list_answer=b'')
    with pytest.raises(pr.PodResourcesUnavailable, match='does not implement /v1.PodResourcesLister/GetAllocatableResources'
                                                         '.*Kubernetes 1.23 or later'):
        pr.allocatable_devices(server.path)


def test_a_slow_kubelet_times_out(kubelet):
    server = kubelet(list_answer=b'', hold=True)
    with pytest.raises(pr.PodResourcesUnavailable, match=r'did not answer /v1.PodResourcesLister/List on .* within 0.2s'):
        pr.list_pod_devices(server.path, timeout=0.2)
    # The client gave up while the kubelet still held the call: it did not wait for the answer.
    assert not server.answered


def test_a_garbled_answer_is_reported(kubelet):
    server = kubelet(list_answer=b'\x0a\x05ab')
    with pytest.raises(pr.PodResourcesUnavailable, match='answer to List on .* is not a valid pod-resources message: '
                                                         'field 1: 5 bytes announced'):
        pr.list_pod_devices(server.path)


def test_missing_socket(socket_dir):
    path = os.path.join(socket_dir, 'kubelet.sock')
    with pytest.raises(pr.PodResourcesUnavailable, match='no kubelet pod-resources socket at .*kubelet.sock: is the kubelet running'):
        pr.list_pod_devices(path)


def test_a_socket_nobody_listens_on(socket_dir):
    path = os.path.join(socket_dir, 'kubelet.sock')
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()  # the file stays, as after a kubelet crash
    with pytest.raises(pr.PodResourcesUnavailable, match='nothing answers on the kubelet pod-resources socket'):
        pr.list_pod_devices(path, timeout=2)


def test_a_file_that_is_no_socket(socket_dir):
    path = os.path.join(socket_dir, 'kubelet.sock')
    open(path, 'w').close()
    with pytest.raises(pr.PodResourcesUnavailable, match='is not a unix socket'):
        pr.list_pod_devices(path)


def test_permission_denied_on_the_socket(kubelet, monkeypatch):
    server = kubelet(list_answer=b'')
    # The tests run as root, whom the kernel never denies: answer as for an unprivileged user.
    monkeypatch.setattr(pr.os, 'access', lambda path, mode: False)
    with pytest.raises(pr.PodResourcesUnavailable, match='permission denied on the kubelet pod-resources socket .*run as root'):
        pr.list_pod_devices(server.path)
    assert server.calls == []


def test_permission_denied_on_the_socket_folder(socket_dir, monkeypatch):
    def denied(path):
        raise OSError(errno.EACCES, 'Permission denied', path)

    monkeypatch.setattr(pr.os, 'stat', denied)
    with pytest.raises(pr.PodResourcesUnavailable, match='permission denied reaching the kubelet pod-resources socket'):
        pr.allocatable_devices(os.path.join(socket_dir, 'kubelet.sock'))


def test_missing_grpcio_says_what_to_install(socket_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, 'grpc', None)  # import grpc now raises ImportError
    with pytest.raises(pr.PodResourcesUnavailable, match=r'needs the Python package grpcio.*pip install grpcio'):
        pr.list_pod_devices(os.path.join(socket_dir, 'kubelet.sock'))


@pytest.mark.parametrize('timeout', [0, -1, '5', None, True])
def test_bad_timeouts(timeout):
    with pytest.raises(ValueError, match='timeout must be a positive number of seconds'):
        pr.list_pod_devices('/nonexistent.sock', timeout=timeout)


def test_concurrent_clients_share_nothing(kubelet):
    server = kubelet(list_answer=_kubelet_style_list_response())
    results = []

    def read():
        results.append(len(pr.list_pod_devices(server.path)))

    threads = [threading.Thread(target=read) for dummy in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [2, 2, 2, 2]


# ---- processes to pods -------------------------------------------------------------------------

UID = '6f1c2a3b-4d5e-4f60-8a9b-0c1d2e3f4a5b'
CID = 'a' * 56 + '01234567'
V1_OTHER = ['12:pids:/', '11:hugetlb:/', '1:name=systemd:/init.scope', '0::/init.scope']


def fake_proc(tmp_path, processes):
    root = tmp_path / 'proc'
    for pid, lines in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / 'cgroup').write_text(''.join(line + '\n' for line in lines))
    root.mkdir(exist_ok=True)
    return str(root)


@pytest.mark.parametrize('lines, expected', [
    # cgroup v1, cgroupfs driver: every hierarchy names the pod; besteffort.
    (['10:memory:/kubepods/besteffort/pod%s/%s' % (UID, CID), '4:cpu,cpuacct:/kubepods/besteffort/pod%s/%s' % (UID, CID)]
     + V1_OTHER, {'pod_uid': UID, 'container_id': CID, 'qos': 'besteffort'}),
    # cgroup v1, cgroupfs, guaranteed (no QoS level), below a --cgroup-root.
    (['9:cpuset:/node-root/kubepods/pod%s/%s' % (UID, CID)], {'pod_uid': UID, 'container_id': CID, 'qos': 'guaranteed'}),
    # cgroup v1, systemd driver, burstable, containerd's scope.
    (['5:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope'
      % (UID.replace('-', '_'), CID)] + V1_OTHER, {'pod_uid': UID, 'container_id': CID, 'qos': 'burstable'}),
    # cgroup v2, systemd driver, guaranteed, CRI-O.
    (['0::/kubepods.slice/kubepods-pod%s.slice/crio-%s.scope' % (UID.replace('-', '_'), CID)],
     {'pod_uid': UID, 'container_id': CID, 'qos': 'guaranteed'}),
    # cgroup v2, cgroupfs driver, burstable, docker-style scope under a nested root.
    (['0::/kind/worker/kubepods/burstable/pod%s/docker-%s.scope' % (UID, CID)],
     {'pod_uid': UID, 'container_id': CID, 'qos': 'burstable'}),
    # A process of the pod's own cgroup (no container) and CRI-O's conmon: the pod, no container.
    (['0::/kubepods/besteffort/pod%s' % UID], {'pod_uid': UID, 'container_id': None, 'qos': 'besteffort'}),
    (['0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/crio-conmon-%s.scope'
      % (UID.replace('-', '_'), CID)], {'pod_uid': UID, 'container_id': None, 'qos': 'besteffort'}),
    # A static pod's UID is a 32-digit hash, not a UUID.
    (['7:pids:/kubepods/burstable/pod0123456789abcdef0123456789abcdef/%s' % CID],
     {'pod_uid': '0123456789abcdef0123456789abcdef', 'container_id': CID, 'qos': 'burstable'}),
])
def test_pods_of_pids_reads_each_cgroup_layout(tmp_path, lines, expected):
    assert pr_cgroups.pods_of_pids([4242], proc_root=fake_proc(tmp_path, {4242: lines})) == {4242: expected}


def test_a_v1_line_naming_the_container_beats_one_naming_only_the_pod(tmp_path):
    proc = fake_proc(tmp_path, {7: ['3:freezer:/kubepods/besteffort/pod%s' % UID,
                                    '2:memory:/kubepods/besteffort/pod%s/%s' % (UID, CID)]})
    assert pr_cgroups.pods_of_pids([7], proc_root=proc)[7]['container_id'] == CID


def test_processes_outside_pods_and_vanished_ones_are_left_out(tmp_path):
    proc = fake_proc(tmp_path, {
        1: V1_OTHER,
        2: ['0::/system.slice/containerd.service'],
        3: ['0::/kubepods-not-really/pod%s/%s' % (UID, CID)],
        4: ['0::/kubepods/burstable/not-a-pod/%s' % CID],
        5: ['garbage line', '0::/kubepods/pod%s/%s' % (UID, CID)],
    })
    assert pr_cgroups.pods_of_pids([1, 2, 3, 4, 5, 999999], proc_root=proc) == {
        5: {'pod_uid': UID, 'container_id': CID, 'qos': 'guaranteed'}}


def test_pods_of_pids_on_this_machine_finds_no_pod_for_itself():
    assert os.getpid() not in pr_cgroups.pods_of_pids([os.getpid()])


@pytest.mark.parametrize('pid', [0, -3, '12', 1.0, True])
def test_pods_of_pids_rejects_bad_pids(tmp_path, pid):
    with pytest.raises(ValueError, match='pid must be a positive int'):
        pr_cgroups.pods_of_pids([pid], proc_root=fake_proc(tmp_path, {}))


def test_pods_of_pids_without_a_proc_filesystem(tmp_path):
    with pytest.raises(pr.PodResourcesUnavailable, match='no proc filesystem at'):
        pr_cgroups.pods_of_pids([1], proc_root=str(tmp_path / 'missing'))


# ---- allocations mapped to the host's GPUs ---------------------------------------------------------------

def _host():
    """Two GPUs: GPU 0 with MIG (GPU instance 3 holding MIG device 0, MIG_A), GPU 1 whole."""
    return Host.from_dict({'gpus': [
        {'index': 0, 'uuid': 'GPU-0', 'processes': [], 'gpu_instances': [
            {'id': 3, 'profile': '1g.10gb', 'placement': {'start': 0, 'size': 1},
             'compute_instances': [_mig_device(MIG_A, 0, '1g.10gb')]}]},
        {'index': 1, 'uuid': 'GPU-1', 'processes': [], 'gpu_instances': []}]})


def _mig_device(uuid, mig_index, profile='1g.10gb', ci_id=0):
    """A compute instance and the MIG device NVML lists for it."""
    return {'id': ci_id, 'profile': profile, 'placement': {'start': ci_id, 'size': 1}, 'uuid': uuid, 'mig_index': mig_index,
            'processes': []}


def _allocation(resource, device_ids, pod='p'):
    return {'namespace': 'ns', 'pod': pod, 'container': 'c', 'resource': resource, 'device_ids': device_ids}


@pytest.mark.parametrize('device_id, by_index', [(MIG_A, False), ('0:0', True), (MIG_A + '::2', False), ('0:0::1', True)])
def test_allocations_of_a_mig_device_by_uuid_index_or_replica(device_id, by_index):
    # A '<gpu>:<mig device>' id (with or without a replica) names a position that shifts: its pod is an index pod.
    assert pr_allocations.allocations_of(_host(), [_allocation('nvidia.com/mig-1g.10gb', [device_id])]).as_dict() == {
        'GPU-0': {'instances': {3: ['ns/p']}, 'gpu': [], 'index_pods': ['ns/p'] if by_index else []}}


@pytest.mark.parametrize('device_id', ['GPU-1', '1', 'GPU-1::0'])
def test_allocations_of_a_whole_gpu(device_id):
    # A whole GPU's index does not move when MIG instances change: no index pod.
    assert pr_allocations.allocations_of(_host(), [_allocation('nvidia.com/gpu', [device_id])]).as_dict() == {
        'GPU-1': {'instances': {}, 'gpu': ['ns/p'], 'index_pods': []}}


def test_an_nvidia_device_id_that_matches_nothing_makes_the_allocations_unknown():
    allocations = [_allocation('nvidia.com/mig-1g.10gb', [MIG_A, MIG_B], pod='a'),
                   _allocation('nvidia.com/gpu', ['7'], pod='b'),
                   _allocation('example.com/nic', ['eth9'], pod='c')]
    with pytest.raises(pr_allocations.UnknownDeviceIds) as error:
        pr_allocations.allocations_of(_host(), allocations)
    message = str(error.value)
    assert '%s (nvidia.com/mig-1g.10gb of pod ns/a)' % MIG_B in message and '7 (nvidia.com/gpu of pod ns/b)' in message
    assert MIG_A + ' ' not in message and 'eth9' not in message and 'nothing is planned' in message
    # Other vendors' resources are none of ours, nor are NVIDIA's Network Operator resources.
    assert pr_allocations.allocations_of(_host(), allocations[2:]).as_dict() == {}
    network = [_allocation('nvidia.com/rdma_shared_device_a', ['rdma0'], pod='d'), _allocation('nvidia.com/hostdev', ['0000:3b:00.2'], pod='e')]
    assert pr_allocations.allocations_of(_host(), network).as_dict() == {}
    # Shared (renamed) GPU resources are checked like the plain ones.
    with pytest.raises(pr_allocations.UnknownDeviceIds):
        pr_allocations.allocations_of(_host(), [_allocation('nvidia.com/gpu.shared', ['9::0'], pod='f')])
    with pytest.raises(pr_allocations.UnknownDeviceIds):
        pr_allocations.allocations_of(_host(), [_allocation('nvidia.com/mig-1g.10gb.shared', ['MIG-nothing::1'], pod='g')])


def test_gpu_allocations_keep_gpu_resources_only():
    kept = [_allocation('nvidia.com/gpu', ['1']), _allocation('nvidia.com/mig-1g.10gb.shared', ['0:0::1']),
            _allocation('nvidia.com/gpu.shared', ['GPU-1::3'])]
    dropped = [_allocation('nvidia.com/hostdev', ['0000:3b:00.2']), _allocation('example.com/nic', ['eth9'])]
    assert pr_allocations.gpu_allocations(dropped[:1] + kept + dropped[1:]) == kept


def _advertising_host():
    """GPU 0 with MIG: a 1g.10gb+me and two 1g.10gb (full-size CIs; MIG devices 0, 1, 3), a 3g.40gb split into two
    compute instances and an empty 2g.20gb (the plugin advertises neither); GPU 1 MIG-capable but off; GPU 2 no MIG."""
    def gi(profile, cis):
        start = len(instances)
        instances.append(None)
        return {'id': start + 1, 'profile': profile, 'placement': {'start': start, 'size': 1}, 'compute_instances': [
            _mig_device('MIG-%s' % mig_index, mig_index, ci, ci_id) for ci_id, (ci, mig_index) in enumerate(cis)]}
    instances = []
    return Host.from_dict({'gpus': [
        {'index': 0, 'uuid': 'GPU-0', 'mig_capable': True, 'mig_mode': {'current': 'enabled'}, 'gpu_instances': [
            gi('1g.10gb+me', [('1g.10gb+me', 3)]), gi('1g.10gb', [('1g.10gb', 1)]), gi('1g.10gb', [('1g.10gb', 0)]),
            gi('3g.40gb', [('1c.3g.40gb', 4), ('2c.3g.40gb', 5)]), gi('2g.20gb', [])]},
        {'index': 1, 'uuid': 'GPU-1', 'mig_capable': True, 'mig_mode': {'current': 'disabled'}, 'gpu_instances': []},
        {'index': 2, 'uuid': 'GPU-2', 'mig_capable': False, 'mig_mode': {'current': 'disabled'}, 'gpu_instances': []}]})


def test_node_resources_name_each_full_size_instance_by_its_profile():
    assert pr_allocations.node_resources(_advertising_host()) == {'nvidia.com/mig-1g.10gb.me': 1, 'nvidia.com/mig-1g.10gb': 2, 'nvidia.com/gpu': 2}


def test_expected_device_ids_per_id_strategy():
    assert pr_allocations.expected_device_ids(_advertising_host()) == {
        'nvidia.com/mig-1g.10gb.me': {'uuid': ['MIG-3'], 'index': ['0:3']},
        'nvidia.com/mig-1g.10gb': {'uuid': ['MIG-0', 'MIG-1'], 'index': ['0:0', '0:1']},
        'nvidia.com/gpu': {'uuid': ['GPU-1', 'GPU-2'], 'index': ['1', '2']},
    }
    assert pr_allocations.expected_device_ids(Host()) == {}


def test_allocatable_gpu_device_ids_from_a_real_grpc_server(kubelet):
    server = kubelet(allocatable_answer=pr_wire.encode_allocatable_response({
        'nvidia.com/mig-1g.10gb': [MIG_B, MIG_A], 'nvidia.com/gpu.shared': ['GPU-1::1', 'GPU-1::0'],
        'nvidia.com/hostdev': ['0000:3b:00.2'], 'example.com/fpga': ['0', '1'],
        # The device_plugin role's rename: MIG devices under another name, found by their ids.
        'nvidia.com/small-gpu': ['%s::1' % MIG_C, '%s::0' % MIG_C]}))
    assert pr.allocatable_gpu_device_ids(server.path, timeout=5) == {
        'nvidia.com/mig-1g.10gb': sorted([MIG_A, MIG_B]), 'nvidia.com/gpu.shared': ['GPU-1::0', 'GPU-1::1'],
        'nvidia.com/small-gpu': ['%s::0' % MIG_C, '%s::1' % MIG_C]}
    assert [call[0] for call in server.calls] == ['GetAllocatableResources']


# ---- DRA: devices of ResourceClaims ---------------------------------------------------------------

def _dra_host(minor0=4, minor1=0):
    """GPU 0 (minor 4: minors need not follow NVML indices) with two 1g GPU instances (profile id 19, placements
    0 and 1) and GPU 1 (minor 0) whole."""
    return Host.from_dict({'gpus': [
        {'index': 0, 'uuid': 'GPU-0', 'minor_number': minor0, 'processes': [], 'gpu_instances': [
            {'id': 9, 'profile': '1g.18gb', 'profile_id': 19, 'placement': {'start': 0, 'size': 1},
             'compute_instances': [_mig_device(MIG_A, 0, '1g.18gb')]},
            {'id': 10, 'profile': '1g.18gb', 'profile_id': 19, 'placement': {'start': 1, 'size': 1},
             'compute_instances': [_mig_device(MIG_B, 1, '1g.18gb')]}]},
        {'index': 1, 'uuid': 'GPU-1', 'minor_number': minor1, 'processes': [], 'gpu_instances': []}]})


def _claim(device, driver='gpu.nvidia.com', cdi=None, pod='p'):
    return {'namespace': 'ns', 'pod': pod, 'container': 'c', 'claim': 'ns/gpu-claim', 'driver': driver, 'pool': 'node-a',
            'device': device, 'cdi_devices': cdi or []}


@pytest.mark.parametrize('claimed, held', [
    (_claim('gpu-4-mig-19-1-1'), {'GPU-0': {'instances': {10: ['ns/p']}, 'gpu': [], 'index_pods': []}}),
    (_claim('gpu-4-mig-1g10gb-19-0'), {'GPU-0': {'instances': {9: ['ns/p']}, 'gpu': [], 'index_pods': []}}),
    (_claim('gpu-4-mig-1g24gb-me-19-1'), {'GPU-0': {'instances': {10: ['ns/p']}, 'gpu': [], 'index_pods': []}}),
    (_claim('gpu-0'), {'GPU-1': {'instances': {}, 'gpu': ['ns/p'], 'index_pods': []}}),
    (_claim('gpu-4'), {'GPU-0': {'instances': {}, 'gpu': ['ns/p'], 'index_pods': []}}),
    # No device name: the standard CDI device names it; a claim-specific one alone does not.
    (_claim('', cdi=['k8s.gpu.nvidia.com/claim=uid-1-gpu-4-mig-19-0-1', 'k8s.gpu.nvidia.com/device=gpu-4-mig-19-0-1']),
     {'GPU-0': {'instances': {9: ['ns/p']}, 'gpu': [], 'index_pods': []}}),
])
def test_a_dra_claimed_device_is_held_by_its_pod(claimed, held):
    # The GPU's minor number, not its NVML index, names it: gpu-0 is GPU 1 here.
    assert pr_allocations.allocations_of(_dra_host(), [claimed]).as_dict() == held


def test_dra_claims_of_other_drivers_are_none_of_ours():
    others = [_claim('channel-0', driver='compute-domain.nvidia.com'), _claim('gpu-0', driver='gpu.example.com')]
    assert pr_allocations.allocations_of(_dra_host(), others).as_dict() == {}
    assert pr_allocations.gpu_allocations(others) == []
    mine = [_claim('gpu-4-mig-19-0-1'), _allocation('nvidia.com/mig-1g.10gb', [MIG_B])]
    assert pr_allocations.gpu_allocations(others + mine) == mine


@pytest.mark.parametrize('claimed, host, message', [
    (_claim('gpu-4-mig-19-2-1'), _dra_host(), 'gpu-4-mig-19-2-1 (DRA claim ns/gpu-claim of pod ns/p, driver gpu.nvidia.com, pool node-a)'),
    (_claim('gpu-4-mig-14-0-2'), _dra_host(), 'gpu-4-mig-14-0-2 (DRA claim'),
    (_claim('gpu-1'), _dra_host(), 'gpu-1 (DRA claim'),
    (_claim('gpu-vfio-0'), _dra_host(), 'gpu-vfio-0 (DRA claim'),
    (_claim('', cdi=['k8s.gpu.nvidia.com/claim=uid-1-gpu-4']), _dra_host(), '(no device name) (DRA claim'),
    (_claim('gpu-4-mig-19-0-1'), _dra_host(minor0=None), 'NVML reported no minor number for some GPUs'),
])
def test_a_dra_device_that_matches_nothing_makes_the_allocations_unknown(claimed, host, message):
    with pytest.raises(pr_allocations.UnknownDeviceIds) as error:
        pr_allocations.allocations_of(host, [claimed])
    assert message in str(error.value) and 'nothing is planned' in str(error.value)


def test_list_response_with_dynamic_resources_parses_both_kinds():
    answer = pr_wire.encode_list_response([{'namespace': 'ml', 'pod': 'p', 'containers': [
        {'name': 'a', 'devices': {'nvidia.com/mig-1g.10gb': ['0:1']},
         'claims': {'ml/big': [{'driver': 'gpu.nvidia.com', 'pool': 'node-a', 'device': 'gpu-0-mig-1g10gb-19-2',
                                'cdi_devices': ['k8s.gpu.nvidia.com/device=gpu-0-mig-1g10gb-19-2']},
                               {'driver': 'gpu.nvidia.com', 'pool': 'node-a', 'device': 'gpu-1'}]}},
        {'name': 'b', 'claims': {'ml/channel': [{'driver': 'compute-domain.nvidia.com', 'pool': 'node-a', 'device': 'channel-0'}]}}]}])
    assert pr_wire.parse_list_response(answer) == [
        {'namespace': 'ml', 'pod': 'p', 'container': 'a', 'resource': 'nvidia.com/mig-1g.10gb', 'device_ids': ['0:1']},
        {'namespace': 'ml', 'pod': 'p', 'container': 'a', 'claim': 'ml/big', 'driver': 'gpu.nvidia.com', 'pool': 'node-a',
         'device': 'gpu-0-mig-1g10gb-19-2', 'cdi_devices': ['k8s.gpu.nvidia.com/device=gpu-0-mig-1g10gb-19-2']},
        {'namespace': 'ml', 'pod': 'p', 'container': 'a', 'claim': 'ml/big', 'driver': 'gpu.nvidia.com', 'pool': 'node-a',
         'device': 'gpu-1', 'cdi_devices': []},
        {'namespace': 'ml', 'pod': 'p', 'container': 'b', 'claim': 'ml/channel', 'driver': 'compute-domain.nvidia.com',
         'pool': 'node-a', 'device': 'channel-0', 'cdi_devices': []},
    ]
    assert [pr_wire.is_claim(entry) for entry in pr_wire.parse_list_response(answer)] == [False, True, True, True]


def test_dynamic_resources_bytes_match_the_v1_field_numbers():
    # ContainerResources.dynamic_resources = 5; DynamicResource claim_name = 2, claim_namespace = 3, claim_resources = 4;
    # ClaimResource cdi_devices = 1, driver_name = 2, pool_name = 3, device_name = 4; CDIDevice name = 1.
    cdi = b'\x0a\x03v/c'
    resource = b'\x0a' + bytes([len(cdi)]) + cdi + b'\x12\x01d\x1a\x01p\x22\x01x'
    claim = b'\x12\x01n\x1a\x02ns\x22' + bytes([len(resource)]) + resource
    container = b'\x0a\x01c\x2a' + bytes([len(claim)]) + claim
    pod = b'\x0a\x03pod\x12\x02ns\x1a' + bytes([len(container)]) + container
    answer = b'\x0a' + bytes([len(pod)]) + pod
    assert pr_wire.parse_list_response(answer) == [{'namespace': 'ns', 'pod': 'pod', 'container': 'c', 'claim': 'ns/n',
                                                    'driver': 'd', 'pool': 'p', 'device': 'x', 'cdi_devices': ['v/c']}]
    assert pr_wire.encode_list_response([{'namespace': 'ns', 'pod': 'pod', 'containers': [
        {'name': 'c', 'claims': {'ns/n': [{'driver': 'd', 'pool': 'p', 'device': 'x', 'cdi_devices': ['v/c']}]}}]}]) == answer


def test_list_pod_devices_reads_dra_claims_from_a_real_grpc_server(kubelet):
    server = kubelet(list_answer=pr_wire.encode_list_response([{'namespace': 'ml', 'pod': 'trainer', 'containers': [
        {'name': 'main', 'claims': {'ml/mig': [{'driver': 'gpu.nvidia.com', 'pool': 'node-a', 'device': 'gpu-4-mig-19-1-1'}]}}]}]))
    devices = pr.list_pod_devices(server.path, timeout=5)
    assert pr_allocations.allocations_of(_dra_host(), devices).as_dict() == {'GPU-0': {'instances': {10: ['ml/trainer']}, 'gpu': [], 'index_pods': []}}


# ---- the invariant: holding is decided by device id, never by the resource's name ---------------------------

@pytest.mark.parametrize('resource', ['nvidia.com/small-gpu', 'example.com/anything', 'nvidia.com/mig-1g.10gb.renamed'])
@pytest.mark.parametrize('device_id, index_pod', [(MIG_A, False), ('0:0', True), (MIG_A + '::1', False)])
def test_a_renamed_resource_holds_its_mig_device_by_id(resource, device_id, index_pod):
    # The device_plugin role's rename (upstream prefixes nvidia.com/) must not make a held instance look free.
    allocation = _allocation(resource, [device_id])
    assert pr_allocations.gpu_allocations([allocation]) == [allocation]
    assert pr_allocations.allocations_of(_host(), [allocation]).as_dict() == {
        'GPU-0': {'instances': {3: ['ns/p']}, 'gpu': [], 'index_pods': ['ns/p'] if index_pod else []}}


def test_a_renamed_resource_holds_a_whole_gpu_by_uuid_or_index():
    for device_id in ('GPU-1', '1'):
        assert pr_allocations.allocations_of(_host(), [_allocation('nvidia.com/small-gpu', [device_id])]).as_dict() == {
            'GPU-1': {'instances': {}, 'gpu': ['ns/p'], 'index_pods': []}}


@pytest.mark.parametrize('device_id', ['MIG-gone', 'GPU-gone', '5:0', 'MIG-gone::2'])
def test_a_gpu_shaped_id_under_any_name_that_names_nothing_refuses(device_id):
    # A GPU-shaped id the host does not have is a device that is gone or an id scheme not understood: nothing is planned.
    with pytest.raises(pr_allocations.UnknownDeviceIds, match='nvidia.com/small-gpu of pod ns/p'):
        pr_allocations.allocations_of(_host(), [_allocation('nvidia.com/small-gpu', [device_id])])


def test_ids_of_other_devices_under_other_names_hold_nothing():
    others = [_allocation('nvidia.com/hostdev', ['0000:3b:00.2']), _allocation('example.com/fpga', ['7']),
              _allocation('example.com/nic', ['eth9'])]
    assert pr_allocations.gpu_allocations(others) == [others[1]]
    assert pr_allocations.allocations_of(_host(), others).as_dict() == {}

# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Which pod a process belongs to, read from ``/proc/<pid>/cgroup`` on the node itself.

The kubepods cgroup of a process names its pod's UID, its QoS class and its container, with the cgroupfs
or the systemd cgroup driver. It names the pods a privileged process serves although it requests no GPU
resource. Nothing here imports Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_resources import PodResourcesUnavailable

# ---- processes to pods -------------------------------------------------------------------------

# cgroupfs driver: .../kubepods[/burstable|/besteffort]/pod<uid>/<container id>
_CGROUPFS_POD = re.compile(r'^pod([0-9a-f][0-9a-f-]*)$')
# systemd driver: .../kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid, _ for ->.slice/<runtime>-<id>.scope
_SYSTEMD_QOS = re.compile(r'^kubepods-(?:burstable|besteffort)\.slice$')
_SYSTEMD_POD = re.compile(r'^kubepods(?:-(burstable|besteffort))?-pod([0-9a-f][0-9a-f_]*)\.slice$')
# A container's cgroup: the bare id (containerd or docker with cgroupfs) or the runtime's scope.
_CONTAINER = re.compile(r'^(?:(?:cri-containerd|crio|docker|containerd)-)?([0-9a-f]{12,64})(?:\.scope)?$')
_QOS_CLASSES = ('burstable', 'besteffort')


def _pod(uid, qos, below):
    container = None
    if below:
        match = _CONTAINER.match(below[0])
        container = match.group(1) if match else None
    return {'pod_uid': uid, 'container_id': container, 'qos': qos}


def _cgroupfs_pod(below_kubepods):
    rest, qos = below_kubepods, 'guaranteed'
    if rest and rest[0] in _QOS_CLASSES:
        rest, qos = rest[1:], rest[0]
    match = _CGROUPFS_POD.match(rest[0]) if rest else None
    return _pod(match.group(1), qos, rest[1:]) if match else None


def _systemd_pod(below_kubepods):
    rest = below_kubepods
    if rest and _SYSTEMD_QOS.match(rest[0]):
        rest = rest[1:]
    match = _SYSTEMD_POD.match(rest[0]) if rest else None
    if not match:
        return None
    return _pod(match.group(2).replace('_', '-'), match.group(1) or 'guaranteed', rest[1:])


def pod_of_cgroup_path(path):
    """``{'pod_uid', 'container_id', 'qos'}`` for a cgroup path inside kubepods, else None.

    ``container_id`` is None for a process of the pod's own cgroup (or a runtime helper such as
    CRI-O's conmon); ``qos`` is 'guaranteed', 'burstable' or 'besteffort'. The kubepods cgroup may
    sit below other cgroups (a kubelet with --cgroup-root, a node inside a container).
    """
    segments = [segment for segment in path.split('/') if segment]
    for index, segment in enumerate(segments):
        parse = {'kubepods': _cgroupfs_pod, 'kubepods.slice': _systemd_pod}.get(segment)
        pod = parse(segments[index + 1:]) if parse else None
        if pod is not None:
            return pod
    return None


def _read_cgroup_file(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        # The process ended (or never was): not in a pod, as far as anyone can tell now.
        if exc.errno in (errno.ENOENT, errno.ESRCH):
            return None
        raise


def pods_of_pids(pids, proc_root='/proc'):
    """``{pid: {'pod_uid', 'container_id', 'qos'}}`` for the processes among ``pids`` that run in a pod.

    Reads ``<proc_root>/<pid>/cgroup`` (cgroup v1: one line per hierarchy, the first inside
    kubepods wins, one naming a container preferred; v2: the single ``0::`` line). Processes that
    are not in a kubepods cgroup, and processes that no longer exist, are left out. A pid that is
    not a positive int is a ValueError; an unreadable cgroup file (other than vanished) an
    OSError.
    """
    if not os.path.isdir(proc_root):
        raise PodResourcesUnavailable('no proc filesystem at %s' % proc_root)
    found = {}
    for pid in pids:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise ValueError('pid must be a positive int, got %r' % (pid,))
        text = _read_cgroup_file(os.path.join(proc_root, str(pid), 'cgroup'))
        if text is None:
            continue
        best = None
        for line in text.splitlines():
            parts = line.split(':', 2)
            if len(parts) != 3:
                continue
            pod = pod_of_cgroup_path(parts[2])
            if pod is not None and (best is None or (best['container_id'] is None and pod['container_id'])):
                best = pod
        if best is not None:
            found[pid] = best
    return found

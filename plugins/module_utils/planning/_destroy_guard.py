# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""When the gated queue may destroy an idle instance without a cordon: no pod may be given it while the run is under
way, and when its pod ended (the release rule).

Pure Python: no NVML, no Ansible imports. The run that destroys (playbooks/mig_demand_create.yml, nvidia_mig_layout
with ``destroy_idle``) reads what pods hold by device id under the host lock and never destroys a held instance. What
that read cannot see is a pod the kubelet gives the instance to after it: the kubelet allocates a pod's devices when it
admits the pod, from the devices the device plugin advertises (pkg/kubelet/cm/devicemanager, ``Allocate`` from the
admit handler, before the pod's first status with container statuses), and a destroyed instance stays advertised
until the device plugin enumerates again. So an idle instance of profile P on node N is destroyed only when no pod
asking for P can be admitted on N before that: every pod bound to N asking for P was admitted, and no pod asking for
P without the slice gate waits for kube-scheduler (pinned to N, or free to go anywhere). Pods with the gate are the
queue's: it pins none to a node while a run is under way there, and releases none of a profile a run destroys.
A pod created without the gate (a namespace the gate does not cover) during the run is not seen here: docs/eda.md says
so, and the gate's default covers every namespace.

Which pods ask for MIG devices (:func:`guarded_profiles`): a ``nvidia.com/mig-<profile>`` resource, time-sliced
(``.shared``) or not, is its profile; a resource the device plugin renamed (time-slicing's ``rename``, named to the
source) says no profile, so it stands for every profile, only on the nodes that advertise it (a pod is bound only
where every resource it asks for is).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass
from typing import Optional, Tuple

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import MIG_PREFIX, profile_of_resource

# Any node: a pod kube-scheduler may bind anywhere. Any profile: a MIG resource whose profile cannot be read.
ANY_NODE, ANY_PROFILE = None, '*'


@dataclass(frozen=True)
class MigPod:
    """A pod asking for MIG devices, as the destroy guard reads it: ``profiles`` it asks for (:data:`ANY_PROFILE` for a
    MIG resource whose profile cannot be read), ``node`` it is bound to
    (None: not bound), ``admitted`` (the kubelet wrote its container statuses: its devices are allocated), ``gated``
    (it carries the slice gate), ``pinned`` (the node its affinity names, the gate gone), ``finished`` and ``nodes``:
    the nodes it may be bound to, when what it asks for is advertised only there (None: any node)."""

    key: str
    profiles: Tuple[str, ...]
    node: Optional[str] = None
    admitted: bool = False
    gated: bool = False
    pinned: Optional[str] = None
    finished: bool = False
    nodes: Optional[Tuple[str, ...]] = None


def guarded_profiles(resources, renamed=()):
    """(profiles, unread) of the resource names a pod asks for, as the guard reads them: a ``nvidia.com/mig-<profile>``
    name, time-sliced (``.shared``) or not, is its profile; another ``nvidia.com/mig-`` name, or one of ``renamed``
    (the names the device plugin gives MIG devices, time-slicing's ``rename``), is :data:`ANY_PROFILE` and listed in
    ``unread``, sorted; any other name (a whole GPU, CPU) asks for no MIG device."""
    profiles, unread = set(), set()
    for name in resources:
        profile = profile_of_resource(name)
        if profile is not None:
            profiles.add(profile)
        elif name.startswith(MIG_PREFIX) or name in renamed:
            profiles.add(ANY_PROFILE)
            unread.add(name)
    return tuple(sorted(profiles)), tuple(sorted(unread))


def unsafe_destroys(pods):
    """{(node or ANY_NODE, profile): why} of the idle instances no run may destroy now, for the first pod that forbids
    each (see the module's docstring)."""
    unsafe = {}
    for pod in sorted(pods, key=lambda p: p.key):
        if pod.finished:
            continue
        if pod.node is not None:
            if pod.admitted:
                continue
            places = [(pod.node, 'pod %s is bound to node %s and not admitted yet (the kubelet allocates its devices '
                       'when it admits it)' % (pod.key, pod.node))]
        elif pod.gated:
            continue
        elif pod.pinned is not None:
            places = [(pod.pinned, 'pod %s is pinned to node %s and not bound yet (the kubelet may give it any idle '
                       'instance of its profile there)' % (pod.key, pod.pinned))]
        elif pod.nodes is None:
            places = [(ANY_NODE, 'pod %s waits for kube-scheduler without the slice gate (it may be bound to any node '
                       'with an idle instance of its profile)' % pod.key)]
        else:
            places = [(node, 'pod %s waits for kube-scheduler without the slice gate (it may be bound to node %s, which '
                       'advertises what it asks for)' % (pod.key, node)) for node in pod.nodes]
        for where, why in places:
            for profile in pod.profiles:
                unsafe.setdefault((where, profile), why)
    return unsafe


def destroy_refusal(unsafe, node, profile):
    """Why an idle ``profile`` instance on ``node`` may not be destroyed now (``unsafe`` from :func:`unsafe_destroys`),
    or None."""
    return (unsafe.get((node, profile)) or unsafe.get((ANY_NODE, profile)) or unsafe.get((node, ANY_PROFILE))
            or unsafe.get((ANY_NODE, ANY_PROFILE)))


class FreedInstances(object):
    """When the instances of each (node, profile) became idle because a pod that held one ended: the release rule's
    clock (GatedQueue's ``idle_since``). An instance idle for another reason (made and not bound yet, declared and never
    used, idle when the source started) has no time here, and the release rule leaves it alone.

    What holds an instance is counted per (node, profile) from the pods bound there, as the queue's view marks holders
    (_demand_fast.with_holders): which instance a pod left does not matter to a destroy run, which destroys that many idle
    instances of the profile and never a held one."""

    def __init__(self):
        self.held = None   # {(node, profile): count} at the last observation
        self.since = {}    # {(node, profile): [times]}, oldest first

    def observe(self, held, idle, now):
        """``held``: {(node, profile): instances pods hold}; ``idle``: {(node, profile): idle instances} now. Returns
        {(node, profile): [times]}, at most one time per idle instance (the newest kept)."""
        if self.held is not None:
            for key in set(self.held) | set(held):
                change = held.get(key, 0) - self.held.get(key, 0)
                times = self.since.setdefault(key, [])
                if change < 0:
                    times.extend([now] * -change)
                else:
                    del times[:change]
        self.held = dict(held)
        for key in list(self.since):
            times = self.since[key]
            self.since[key] = times[max(0, len(times) - idle.get(key, 0)):]
            if not self.since[key]:
                del self.since[key]
        return dict((key, list(times)) for key, times in self.since.items())

    def forget(self, key, when):
        """An instance of ``key`` (node, profile) idle since ``when`` was decided destroyed: its time goes with it (a run
        that then refuses leaves the instance idle without a time, which the release rule leaves alone)."""
        times = self.since.get(key) or []
        if when in times:
            times.remove(when)
        if not times:
            self.since.pop(key, None)

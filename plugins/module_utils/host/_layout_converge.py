# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The one host-side path from a declared layout to the GPUs: decide, apply, verify.

nvidia_mig_layout and the boot-time apply both call :func:`converge`; the decision alone
(:func:`decide`) is pure. No Ansible imports.

Per GPU, in this order: the entries of the layout that match it (mig-parted rules, see
_layout_matching), the MIG mode (_mig_mode), then the instances (_mig_planner, _plan_executor).
NVML describes a GPU's profiles only while MIG is enabled, so a GPU whose MIG is still off is
planned in two steps: the mode now, its instances "after MIG is enabled". Its entry is still checked
before the first change of any GPU, against what can be known with MIG off (_mig_forecast).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import LayoutConfigError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import (
    NothingMatchedError, choose_entry, match_gpus, nothing_matched)
from ansible_collections.gpufleet.mig.plugins.module_utils.host._plan_executor import ApplyError, apply_gpus, apply_plan
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_forecast import check_without_mig
from ansible_collections.gpufleet.mig.plugins.module_utils.host._mig_mode import ModeDecision, change_mode, clearing_plan, disable_mig, mode_name
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import DEFERRED_NOTE, PlanningError, destroyed_instances, layout_of, plan_gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import HostHolders
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_allocations import allocations_of, index_id_refusal


class LayoutRequest(object):
    """What to converge to: the entries of one layout and how far the host may go.

    ``pod_devices``: the kubelet's pod-resources allocations (_pod_resources.list_pod_devices), and
    ``pid_pods``: pods found through the cgroups of GPU processes (_pod_cgroups.pods_of_pids),
    for where pod-resources cannot be read (see :func:`allocations_of`). Instances that pods hold
    are busy for the planner whether or not a process runs on them. With ``evict`` (nvidia_mig_layout's option, set
    by the role's in-place switch on a Kubernetes node) the plan may still take them, as few as possible, and names
    the pods to evict before the apply; the apply itself never runs with ``evict``. ``drain`` (with ``evict``: the
    role's drain and drain fallback) names every pod that holds any device of the host's GPUs, by the same
    allocations (_pod_allocations.allocations_of), so a drain sees renamed resources and DRA claims as in place does.
    ``defer_pending``: a GPU whose MIG mode change would stay pending until a reboot gets its mode set back at once
    (action ``revert_mig_mode``): nothing is left pending on it before the role has drained the node for the reboot.
    ``create_only``: {GPU index: {profile: count}}, the demand fast path's expected creates: a change that is anything
    else is refused before any GPU changes (:func:`create_refusal`); None: no such limit. ``destroy_idle``: with it, the
    destroys of idle instances the gated queue expects too, {GPU index: {profile: count}}.
    """

    def __init__(self, name, entries, unmatched='ignore', allow_reset=True, pod_devices=None, pid_pods=None, evict=False,
                 drain=False, defer_pending=False, create_only=None, destroy_idle=None):
        self.name = name
        self.entries = entries
        self.unmatched = unmatched
        self.allow_reset = allow_reset
        self.pod_devices = pod_devices or []
        self.pid_pods = pid_pods or {}
        self.evict = evict
        self.drain = drain
        self.defer_pending = defer_pending
        self.create_only = create_only
        self.destroy_idle = destroy_idle


class GpuDecision(object):
    """What one matched GPU needs: its mode, and its instance plan (None until MIG is enabled)."""

    def __init__(self, gpu, match, request, holders, host_gpus=None):
        """``holders``: the pods that hold this GPU (_host_model.GpuHolders)."""
        self.gpu = gpu
        self.match = match
        self.wanted_enabled = match['mig_enabled']
        self.holders = holders
        # Pods holding the whole GPU: a mode change needs them gone. Pods on its instances refuse in
        # plan_gpu, which names the instance (MIG goes off only once every instance is gone).
        self.mode = ModeDecision(gpu, self.wanted_enabled, request.allow_reset, pods=holders.gpu)
        self.evict = request.evict
        self.gpu_pods = list(holders.gpu) if self.mode.changed else []
        problem = self.mode.problem()
        if problem and self.evict and not self._pids_outside_pods():
            problem = None      # every process and pod is one evicted first
        if problem:
            raise PlanningError(problem)
        self.instances = None
        self.plan = None
        self.deferred = False
        self.checked_with = None
        if self.wanted_enabled:
            # The entry may depend on the GPU's memory slices (pending match): known once MIG is on.
            if gpu.mig_mode.enabled and not match['pending']:
                self.instances = concrete_instances(match['mig_devices'], gpu)
                self.plan = plan_gpu(gpu, self.instances, holders=holders, evict=self.evict)
            else:
                self.deferred = True
                # Refused now rather than after the mode step of this or another GPU (no half-changed host).
                self.checked_with = check_without_mig(gpu, match, request.unmatched, request.name, host_gpus)
        else:
            self.plan = clearing_plan(gpu, holders, self.evict)
        refusal = None if self.evict else index_id_refusal(
            self.index, self.index_id_pods(), 'the change layout %s needs on this GPU' % request.name)
        if refusal:
            raise PlanningError(refusal)

    def _pids_outside_pods(self):
        """Processes on the GPU that no pod holding it (or their instance) accounts for."""
        def accounted(gi_id):
            return self.holders.gpu if gi_id is None else self.holders.of_instance(gi_id)
        return sorted(set(pid for gi_id, pid in self.gpu.process_places() if not accounted(gi_id)))

    @property
    def index(self):
        return self.gpu.index

    @property
    def in_layout(self):
        return self.mode.in_effect and not self.deferred and not (self.plan and self.plan.changed)

    @property
    def reboot_required(self):
        """The wanted mode is pending and nothing but a reset or reboot applies it."""
        mode = self.gpu.mig_mode
        wanted = mode_name(self.wanted_enabled)
        return mode.pending == wanted and mode.current != wanted

    def actions(self):
        """Mode steps and instance actions in the order they run (disabling: instances first)."""
        mode_steps = []
        if self.mode.needs_set:
            mode_steps.append({'action': 'set_mig_mode', 'mode': self.mode.wanted})
        if self.mode.needs_reset:
            mode_steps.append({'action': 'reset_gpu', 'mode': self.mode.wanted})
        instance_steps = list(self.plan.actions) if self.plan else []
        if not self.wanted_enabled:
            return instance_steps + mode_steps
        return mode_steps + instance_steps

    def destroyed_instances(self):
        """The GPU instances the plan destroys, with the MIG device UUIDs workloads know them by and their pods."""
        return destroyed_instances(self.gpu, self.plan, self.holders)

    def index_id_pods(self):
        """Pods holding this GPU's MIG devices by index id, when the GPU's MIG devices change: after any
        change such an id may name another instance (_pod_allocations.index_id_refusal), so every such pod
        goes, whichever instance it holds."""
        changes = self.mode.changed or bool(self.plan and self.plan.changed)
        return list(self.holders.index_pods) if changes else []

    def eviction_reasons(self):
        """{pod: why it must be gone before this GPU changes}: on an instance the plan destroys, on the whole
        GPU when its mode changes, or holding an index id on a GPU whose MIG devices change."""
        reasons = {}
        for pod in self.gpu_pods:
            reasons.setdefault(pod, 'holds GPU %d, whose MIG mode changes' % self.index)
        for instance in self.destroyed_instances():
            for pod in instance['allocated_to']:
                reasons.setdefault(pod, 'holds GPU %d\'s GPU instance %d (%s), which the layout destroys'
                                   % (self.index, instance['id'], instance['profile']))
        for pod in self.index_id_pods():
            reasons.setdefault(pod, 'holds a MIG device of GPU %d by index id, which would name another instance once '
                                    'the GPU\'s MIG devices change' % self.index)
        return reasons

    def pods_to_evict(self):
        """Pods that must be gone before this GPU changes (see :meth:`eviction_reasons`), in that order."""
        pods = list(self.gpu_pods)
        for instance in self.destroyed_instances():
            pods.extend(p for p in instance['allocated_to'] if p not in pods)
        pods.extend(p for p in self.index_id_pods() if p not in pods)
        return pods

    def as_dict(self):
        return {
            'index': self.index,
            'uuid': self.gpu.uuid,
            'name': self.gpu.name,
            'pci_device_id': self.gpu.pci_device_id,
            'entries': list(self.match['entries']),
            'mig_enabled': self.wanted_enabled,
            'mig_devices': self.match['mig_devices'],
            'candidates': self.match['candidates'],
            'instances': self.instances,
            'mode': {'before': self.gpu.mig_mode.as_dict(), 'after': self.mode.after.as_dict()},
            'in_layout': self.in_layout,
            'reboot_required': self.reboot_required,
            'deferred': self.deferred,
            'note': DEFERRED_NOTE if self.deferred else None,
            'checked_with': self.checked_with,
            'before': layout_of(self.gpu),
            'after': self.plan.after if self.plan else ([] if not self.wanted_enabled else None),
            'actions': self.actions(),
            'destroyed_instances': self.destroyed_instances(),
            'pods_to_evict': self.pods_to_evict(),
            'index_id_pods': self.index_id_pods(),
            'free_space_after': self.plan.analysis if self.plan else None,
        }


class HostDecision(object):
    """Every GPU of a host against one layout."""

    def __init__(self, request, gpus, unmatched, skipped, holders=None):
        self.request = request
        self.gpus = gpus
        self.unmatched = unmatched
        self.skipped = skipped
        self.holders = holders or HostHolders()

    @property
    def in_layout(self):
        return all(g.in_layout for g in self.gpus)

    @property
    def reboot_required(self):
        return any(g.reboot_required for g in self.gpus)

    def pods_to_evict(self):
        """The pods that must be gone before the apply: those on what the plan takes (in place) or, with the
        request's ``drain`` and ``evict``, every pod that holds any GPU or instance of the host."""
        pods = set()
        for gpu in self.gpus:
            pods.update(gpu.pods_to_evict())
        if self.request.drain and self.request.evict:
            pods.update(self.holders.pods())
        return sorted(pods)

    def eviction_reasons(self):
        """{pod: reason} for every pod of :meth:`pods_to_evict` (a pod on several GPUs: every reason, joined)."""
        reasons = {}
        for gpu in self.gpus:
            for pod, reason in sorted(gpu.eviction_reasons().items()):
                reasons[pod] = '%s; %s' % (reasons[pod], reason) if pod in reasons else reason
        for pod in self.pods_to_evict():
            reasons.setdefault(pod, 'holds a GPU device of the host (drain: every pod that holds one goes)')
        return reasons


def deferred_gpus(done):
    """The GPUs whose mode change was set back because it would stay pending until a reboot (``defer_pending``)."""
    return sorted(set(a['gpu'] for a in done or [] if a.get('action') == 'revert_mig_mode'))


def decide(host, request):
    """Pure: the host's GPUs (_host_model.Host) against ``request``. Raises on anything that
    cannot be applied (a busy instance the layout drops, a profile the GPU does not offer, ...)."""
    matched = match_gpus(request.entries, host.gpus, request.unmatched, layout=request.name)
    refusal = nothing_matched(matched, request.entries, request.name)
    if refusal:
        raise NothingMatchedError(refusal, matched['unmatched'])
    by_index = dict((gpu.index, gpu) for gpu in host.gpus)
    holders = allocations_of(host, request.pod_devices, request.pid_pods)
    decisions = [GpuDecision(by_index[match['index']], match, request, holders.of(by_index[match['index']].uuid), host.gpus)
                 for match in matched['gpus']]
    return HostDecision(request, decisions, matched['unmatched'], matched['skipped'], holders)


def in_layout_by_uuid(host, request):
    """{GPU uuid: whether it holds the layout}, for the metrics. Unlike :func:`decide` it never raises
    for one GPU: a GPU that cannot be brought to the layout (a busy instance in the way) is simply not
    in it. A GPU no entry matches (left as it is) is None; GPUs without MIG are left out."""
    try:
        matched = match_gpus(request.entries, host.gpus, request.unmatched, layout=request.name)
    except LayoutConfigError:
        return {}
    by_index = dict((gpu.index, gpu) for gpu in host.gpus)
    holders = allocations_of(host, request.pod_devices, request.pid_pods)
    result = {}
    for match in matched['gpus']:
        gpu = by_index[match['index']]
        try:
            result[gpu.uuid] = GpuDecision(gpu, match, request, holders.of(gpu.uuid)).in_layout
        except (LayoutConfigError, PlanningError):
            result[gpu.uuid] = False
    result.update((gpu['uuid'], None) for gpu in matched['unmatched'])
    return result


def create_refusal(decisions, expected, destroys=None):
    """Why a host's change is not exactly the creates (and idle destroys) a demand run expects, or None.

    ``decisions``: each GPU's decision as nvidia_mig_layout returns it (index, actions, deferred); ``expected``:
    {GPU index: {profile: count}} of GPU instances to create; ``destroys``: the same of idle GPU instances to destroy
    (the gated queue's reshape or release rule; None or empty: none). Anything else (another destroy, a mode change, a
    reset, other creates, a GPU waiting for its mode) is refused: the slices the decision was made on are not as it saw
    them, and the demand path decides again. A destroy of an instance a pod or process holds never reaches this check:
    without ``evict`` the plan keeps such an instance or is refused naming it (_mig_planner.plan_gpu)."""
    wanted = _counts(expected)
    wanted_gone = _counts(destroys)
    found, gone = {}, {}
    for gpu in decisions:
        index = str(gpu.get('index'))
        if gpu.get('deferred'):
            return 'GPU %s waits for a MIG mode change' % index
        for action in gpu.get('actions') or []:
            kind = action.get('action')
            if kind == 'create_compute_instance' or (kind == 'destroy_compute_instance' and wanted_gone):
                continue   # part of its GPU instance's create or destroy
            if kind == 'create_gpu_instance' or (kind == 'destroy_gpu_instance' and wanted_gone):
                counts = (found if kind == 'create_gpu_instance' else gone).setdefault(index, {})
                counts[action.get('profile')] = counts.get(action.get('profile'), 0) + 1
            else:
                return 'GPU %s would need %s (%s), not only the %s expected' % (
                    index, str(kind).replace('_', ' '), action.get('profile') or action.get('mode') or '',
                    'creates and idle destroys' if wanted_gone else 'creates')
    if gone != wanted_gone:
        return 'the GPUs would lose %s, not the idle instances expected (%s): their instances changed since the decision' % (
            json.dumps(gone, sort_keys=True), json.dumps(wanted_gone, sort_keys=True))
    if found != wanted:
        return 'the GPUs would get %s, not the creates expected (%s): the free slices changed since the decision' % (
            json.dumps(found, sort_keys=True), json.dumps(wanted, sort_keys=True))
    return None


def _counts(expected):
    """{GPU index as text: {profile: count}} without zero counts."""
    counts = {}
    for index, profiles in (expected or {}).items():
        kept = dict((profile, count) for profile, count in (profiles or {}).items() if count)
        if kept:
            counts[str(index)] = kept
    return counts


@contextlib.contextmanager
def _no_clients():
    yield []


def converge(backend, request, apply=True, hold_clients=None, host=None):
    """Decide and (when ``apply``) bring the host to the layout, then verify it.

    ``host``: the backend's read of the host, when the caller has one already (else it is read).
    ``hold_clients``: a context manager factory that keeps the host's GPU clients stopped while the
    GPUs change (the module stops systemd services; the boot unit runs before them). Returns
    (decision before, decision after or None, actions done, the host as it is now). A GPU whose
    mode stays pending (reset not allowed or refused) ends ``reboot_required``, its instances
    left for after the reset or reboot; any other difference after the apply is an ApplyError.
    """
    host = host or backend.read_host()
    before = decide(host, request)
    if request.create_only is not None and not before.in_layout:
        refusal = create_refusal([gpu.as_dict() for gpu in before.gpus], request.create_only, request.destroy_idle)
        if refusal:
            raise PlanningError('layout %s is not a %s change here: %s' % (
                request.name, 'create-only' if not request.destroy_idle else 'create and idle-destroy', refusal))
    if not apply or before.in_layout:
        return before, None, [], host
    if request.evict:
        raise PlanningError('an apply never plans with pods to evict: evict them, then apply without evict')
    with (hold_clients or _no_clients)():
        done = apply_gpus(backend, before.gpus, lambda decision, gpu_done: _apply_gpu(backend, decision, request, gpu_done))
    host = backend.read_host()
    after = decide(host, request)
    deferred = deferred_gpus(done)
    wrong = [g for g in after.gpus if not g.in_layout and not g.reboot_required and g.index not in deferred]
    if wrong:
        raise ApplyError('after applying layout %s, GPU(s) %s do not hold it: %s' % (
            request.name, ', '.join(str(g.index) for g in wrong),
            '; '.join('GPU %d: %s' % (g.index, g.actions()) for g in wrong)), done, None)
    return before, after, done, host


def _apply_plan_or_replan(backend, decision, gpu, plan, instances, done):
    """Apply one GPU's instance plan. A destroy NVML refuses with IN_USE (a process started since the read, or a
    GPU client such as DCGM holding the MIG devices: DCGM issues 95 and 276) re-reads the GPU: with a process now
    listed on the instance, the plan is made again around it once (it keeps busy instances, or refuses the layout
    naming the busy one); with none listed, the GPU is reported busy with what holds it."""
    index = decision.index
    try:
        actions, dummy = apply_plan(backend, gpu, plan)
    except ApplyError as exc:
        done.extend(dict(a, gpu=index) for a in exc.done)
        if not exc.refused_in_use:
            raise ApplyError(str(exc), [], exc.layout_now, cause=exc.cause)
        gpu = backend.read_gpu(index)
        going = set(a['gpu_instance_id'] for a in plan.actions if a['action'].startswith('destroy'))
        if not any(gi.busy for gi in gpu.gpu_instances if gi.id in going):
            raise ApplyError('GPU %d is busy: NVML refused to destroy an instance (NVML_ERROR_IN_USE) and lists no process on '
                             'it, so a GPU client holds its MIG devices (DCGM, dcgm-exporter: stop it, or name its systemd '
                             'service in gpu_clients); %s' % (index, exc.cause), [], layout_of(gpu), cause=exc.cause)
        plan = plan_gpu(gpu, instances, holders=decision.holders, evict=decision.evict)
        actions, dummy = apply_plan(backend, gpu, plan)
    done.extend(dict(a, gpu=index) for a in actions)


def _apply_gpu(backend, decision, request, done):
    """Bring one GPU to its layout; each action is appended to ``done`` as it is done."""
    index = decision.index
    if not decision.wanted_enabled:
        outcome = disable_mig(backend, decision.mode, decision.plan, report_refused_reset=True,
                              apply_clear=lambda plan: _apply_plan_or_replan(backend, decision, decision.gpu, plan, {}, done))
        if outcome:
            done.append(dict(outcome, action='set_mig_mode', gpu=index))
        return
    if decision.mode.changed:
        outcome = change_mode(backend, decision.mode, report_refused_reset=True)
        done.append(dict(outcome, action='set_mig_mode', gpu=index))
        if outcome['reset_required']:
            if request.defer_pending and outcome['after']['pending'] != decision.gpu.mig_mode.pending:
                # Pending until a reboot, which needs the node drained first: not left pending before that.
                backend.set_mig_mode(index, decision.gpu.mig_mode.pending == 'enabled')
                done.append({'action': 'revert_mig_mode', 'gpu': index, 'mode': decision.gpu.mig_mode.pending,
                             'pending_reason': outcome.get('pending_reason')})
            return
    plan = decision.plan
    gpu = decision.gpu
    instances = decision.instances
    if decision.deferred or decision.mode.changed:
        gpu = backend.read_gpu(index)
        if gpu.mig_mode.current != decision.mode.wanted:
            # Still pending (no reset allowed, or none tried): the profiles stay unknown; reported as reboot_required.
            return
        match = choose_entry(decision.match, gpu, request.unmatched, layout=request.name)
        if match['mig_devices'] is None:
            # No entry fits the memory slices NVML now reports: the GPU is left as it is (as unmatched).
            return
        instances = concrete_instances(match['mig_devices'], gpu)
        plan = plan_gpu(gpu, instances, holders=decision.holders, evict=decision.evict)
    if plan.changed:
        _apply_plan_or_replan(backend, decision, gpu, plan, instances, done)

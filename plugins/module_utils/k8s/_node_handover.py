# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The Kubernetes hand-over of a node around a MIG change, decided as values.

Pure Python (no Ansible, no Kubernetes client): the mig_layout role reads the node and its pods
with kubernetes.core, hands them to these functions through the gpufleet.mig.mig_handover_*
filters, and writes what they return. Each value says why, and ``problem`` says why not.

The node protocol is the GPU operator's (NVIDIA mig-parted's k8s-mig-manager, reconfigure-mig.sh):
``nvidia.com/mig.config`` is the requested layout, ``nvidia.com/mig.config.state`` is pending while
the change runs, rebooting before a reboot, then success or failed; each GPU component is paused by
setting its ``nvidia.com/gpu.deploy.<component>`` label to ``paused-for-mig-change`` (a ``false``
set by someone else is left alone), its pods are awaited until deleted, and the label is set back
to ``true`` afterwards.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gpu_pods import _selector_keys, pod_key
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._node_events import truncate
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_resources import GRPC_MISSING, PODS_UNKNOWN, PODS_UNREADABLE

CONFIG_LABEL = 'nvidia.com/mig.config'
STATE_LABEL = 'nvidia.com/mig.config.state'
STATES = ('pending', 'rebooting', 'success', 'failed')
DEPLOY_PREFIX = 'nvidia.com/gpu.deploy.'
PAUSED = 'paused-for-mig-change'
# Set while the role holds the node cordoned for a change (kept after a failed one that changed a GPU).
CORDON_ANNOTATION = 'gpufleet.mig/cordoned-for-mig-change'
# Why the last change failed (dropped by the next success).
FAILURE_ANNOTATION = 'gpufleet.mig/mig-change-failure'
# The GPU operator's components, each paused when its label is on the node.
DEFAULT_COMPONENTS = ('device-plugin', 'gpu-feature-discovery', 'dcgm-exporter', 'dcgm', 'nvsm', 'operator-validator')
SWITCHES = ('in_place', 'drain')
# The modules' pod_resources (doc fragment gpufleet.mig.nvml.pod_resources).
POD_RESOURCES_MODES = ('auto', 'required', 'off')
# The only steps of a change that disturbs no pod: new GPU and compute instances in free slices.
CREATE_ACTIONS = ('create_gpu_instance', 'create_compute_instance')


class HandoverError(ValueError):
    """Input the hand-over cannot work with (a programming or configuration error)."""


class ChangeScope(object):
    """Whether a host's change only creates instances in free slices, from nvidia_mig_layout's decision (apply: false).

    Create-only: every planned step of every GPU is a create_gpu_instance or create_compute_instance (no
    destroy, no MIG mode change, no GPU reset), no GPU waits for a mode step (``deferred``), no reboot, and
    no pod to evict (a pod holding a MIG device by index id counts: a new instance may shift the index ids,
    so the decision names it). Such a change touches no instance any pod holds or could be given meanwhile:
    the node needs no cordon and no eviction (issue: "only the device plugin advertising the new instances").
    Anything else destroys or may disturb, and takes the cordoned hand-over.
    """

    def __init__(self, decision):
        decision = decision or {}
        self.creates = 0
        self.disturbing = []
        for gpu in decision.get('gpus') or []:
            for action in gpu.get('actions') or []:
                if action.get('action') in CREATE_ACTIONS:
                    self.creates += 1
                else:
                    self.disturbing.append('GPU %s: %s' % (gpu.get('index'), str(action.get('action')).replace('_', ' ')))
            if gpu.get('deferred'):
                self.disturbing.append('GPU %s: its instances wait for a MIG mode change' % gpu.get('index'))
        if decision.get('reboot_required'):
            self.disturbing.append('a reboot')
        if decision.get('pods_to_evict'):
            self.disturbing.append('pod(s) to evict: %s' % ', '.join(decision['pods_to_evict']))
        self.create_only = self.creates > 0 and not self.disturbing

    def as_dict(self):
        if self.create_only:
            reason = 'the change only creates %d instance(s) in free slices' % self.creates
        elif self.creates == 0 and not self.disturbing:
            reason = 'the change plans no step'
        else:
            reason = 'the change does more than create instances (%s)' % '; '.join(self.disturbing)
        return {'create_only': self.create_only, 'creates': self.creates, 'disturbing': self.disturbing, 'reason': reason}


class SwitchMode(object):
    """How the node's pods are handed over, decided once from the option and what the host read.

    ``in_place``: only the pods on instances that go are evicted; needs the kubelet's pod-resources.
    ``drain``: every pod that holds a GPU is evicted (chosen, or the allowed fallback).
    ``repack``: only unallocated instances move: nobody is evicted.
    ``create_only``: in place, for a change that only creates instances in free slices (ChangeScope) on a node
    whose pod-resources were read: no pod is disturbed, so the node is not cordoned and nobody is evicted. The
    GPU components are still paused and restored, which restarts the device plugin: NVIDIA's k8s-device-plugin
    enumerates the MIG devices only when its plugins start (cmd/nvidia-device-plugin/main.go: startPlugins
    builds the resource managers from NVML's device list; it restarts them only on a re-created kubelet.sock,
    SIGHUP or a changed config file, never on a new MIG device), and the GPU operator's MIG manager restarts it
    the same way, through nvidia.com/gpu.deploy.device-plugin=paused-for-mig-change and back (mig-parted's
    reconfigure-mig.sh). Pods keep running meanwhile: the kubelet keeps their devices (its checkpoint).
    Every other mode cordons the node.
    """

    def __init__(self, switch, pod_resources, drain_fallback=False, repack=False, create_only=False):
        if switch not in SWITCHES:
            raise HandoverError('mig_layout_k8s_switch must be one of %s, not %r' % (', '.join(SWITCHES), switch))
        pod_resources = pod_resources or {}
        self.read = bool(pod_resources.get('read'))
        unread = pod_resources.get('reason') or 'the kubelet did not answer'
        self.mode = None
        self._problem = None
        if repack:
            self.mode = 'repack'
            self.reason = 'a repack moves only unallocated instances: nobody is evicted'
        elif create_only and switch == 'in_place' and self.read:
            self.mode = 'create_only'
            self.reason = ('the change only creates instances in free slices: no pod is disturbed, so the node is not cordoned '
                           'and nobody is evicted; the device plugin is restarted to advertise them')
        elif switch == 'drain':
            self.mode = 'drain'
            self.reason = "mig_layout_k8s_switch=drain: every pod that holds a GPU is evicted, as the GPU operator's MIG manager does"
        elif self.read:
            self.mode = 'in_place'
            self.reason = "in place: only the pods on instances that go are evicted (the kubelet's pod-resources say which pod holds which)"
        elif drain_fallback:
            self.mode = 'drain'
            self.reason = ("the kubelet's pod-resources could not be read (%s): mig_layout_k8s_drain_fallback=true evicts every pod "
                           'that holds a GPU instead' % unread)
        else:
            self.reason = None
            self._problem = ("which pod holds which instance cannot be read (%s) and mig_layout_k8s_drain_fallback=false: "
                             'nothing was changed' % unread)

    def problem(self):
        """Why no switch is possible, or None."""
        return self._problem

    @property
    def cordon(self):
        """Whether the hand-over cordons the node (every mode but create_only)."""
        return self.mode is not None and self.mode != 'create_only'

    @property
    def decide_again(self):
        """Whether the host decides again after the cordon (in place and drain: the pods to evict are named by the host,
        from pod-resources, by device id; repack and create_only evict nobody)."""
        return self.mode in ('in_place', 'drain')

    @property
    def drain(self):
        """Whether the host names every pod that holds a device of its GPUs (nvidia_mig_layout's drain)."""
        return self.mode == 'drain'

    def as_dict(self):
        return {'mode': self.mode, 'reason': self.reason, 'problem': self.problem(), 'cordon': self.cordon,
                'decide_again': self.decide_again, 'drain': self.drain, 'pod_resources_read': self.read}


def pod_resources_use(k8s, switch, drain_fallback, decision=None, applied=None, repack=False, requested='auto'):
    """How the host reads the kubelet's pod-resources through a change, and what the hand-back compares.

    ``decide``: nvidia_mig_layout's (or the repack's) pod_resources for the decisions: off a Kubernetes node ``auto``
    (read where a kubelet runs); on one, ``required`` for in place (which pod holds which instance is its whole
    point) unless the drain fallback is allowed, ``auto`` for a drain (it reads them too: a renamed resource or a
    DRA claim is seen only there; no socket at all, and the drain refuses the pods it cannot see,
    _node_evictions), ``required`` for a repack (it evicts nobody, so it must know every instance a pod holds;
    no fallback). ``apply``: the apply reads them as the decision did (a decision that could not read them, the
    drain fallback, applies with ``off``; every other apply reads them again under the host lock, so it never
    destroys a held instance).

    ``compare_ids``: after the change the kubelet's advertised device ids are compared as sets with the ids the
    apply expects (its ``expected_device_ids``), in every mode, wherever the apply names them and the decision
    read the kubelet; otherwise the node's allocatable counts, which a stale device plugin passes. Every mode
    destroys and recreates instances (a repack's move included: a recreated instance has a new UUID), so an
    uncordoned node whose kubelet still advertises a gone id hands a pod a device that does not exist. On a
    Kubernetes node (SwitchMode's modes; "ids": the apply's result names its expected ids):

    =========================  ========  ========  ==============  =========  ===========  ===========
    mode                       switch    fallback  pods read       decide     apply        compare_ids
    =========================  ========  ========  ==============  =========  ===========  ===========
    in place                   in_place  false     yes             required   required     ids
    in place                   in_place  true      yes             auto       auto         ids
    create-only                in_place  either    yes             as above   as above     ids
    drain, chosen              drain     either    yes             auto       auto         ids
    drain, chosen, no kubelet  drain     either    no              auto       off          counts (1)
    drain as the fallback      in_place  true      no              auto       off          counts (1)
    repack                     either    either    yes (required)  required   required     ids
    reboot path                the mode it came from: the apply after the reboot names ids     ids if read
    already in the layout      the decision is what the GPUs hold and names ids (recovery)     ids if read
    any mode, no ids named     -         -         -               -          -            counts (2)
    =========================  ========  ========  ==============  =========  ===========  ===========

    (1) The kubelet's advertised ids are read through the same pod-resources socket (GetAllocatableResources)
    that did not answer the decision, or whose allocations named devices the host does not know (the retry
    decides with ``off``): there is nothing to compare the expected ids with, so the Node's allocatable counts
    (read from the API server) are what is left. (2) An apply result without ``expected_device_ids`` (a failed
    or older module) says nothing to compare ids with.

    ``requested`` is the user's ``mig_layout_k8s_pod_resources``: off a Kubernetes node it is the mode; on one,
    ``required`` makes every mode above read them or fail (no drain fallback for an unreadable kubelet), and ``off`` is
    refused, since a node's hand-over must know which pod holds which instance.
    """
    if switch not in SWITCHES:
        raise HandoverError('mig_layout_k8s_switch must be one of %s, not %r' % (', '.join(SWITCHES), switch))
    if requested not in POD_RESOURCES_MODES:
        raise HandoverError('mig_layout_k8s_pod_resources must be one of %s, not %r' % (', '.join(POD_RESOURCES_MODES), requested))
    if k8s and requested == 'off':
        raise HandoverError('mig_layout_k8s_pod_resources=off on a Kubernetes node (mig_layout_k8s_node is set): its hand-over '
                            'must read which pod holds which instance (set auto, or required)')
    if not k8s:
        decide = requested
    elif requested == 'required':
        decide = 'required'
    elif repack:
        decide = 'required'
    elif switch == 'drain' or drain_fallback:
        decide = 'auto'
    else:
        decide = 'required'
    read = bool(((decision or {}).get('pod_resources') or {}).get('read'))
    apply = 'off' if k8s and decision is not None and not read else decide
    names_ids = (applied or {}).get('expected_device_ids') is not None
    return {'decide': decide, 'apply': apply, 'compare_ids': names_ids and read}


# The package missing_required_lib names when pynvml cannot be imported (_module_support.run_module).
PYNVML_PACKAGE = 'nvidia-ml-py'


# The node label the GPU operator sets where its MIG manager owns the node's MIG layout.
MIG_MANAGER_LABEL = DEPLOY_PREFIX + 'mig-manager'


def other_owners(node, resource_slices=()):
    """Who else manages MIG on the node (two owners would undo each other's layouts), in words; empty when nobody.

    The GPU operator's MIG manager (node label nvidia.com/gpu.deploy.mig-manager=true), and NVIDIA's DRA driver with
    dynamic MIG: its ResourceSlices (``resource_slices``, every version the API server serves, read for the node and
    the driver gpu.nvidia.com) publish partitionable devices through ``spec.sharedCounters`` (KEP-4815), and the
    driver then creates and destroys MIG partitions itself.
    """
    labels = ((node or {}).get('metadata') or {}).get('labels') or {}
    owners = []
    if labels.get(MIG_MANAGER_LABEL) == 'true':
        owners.append('the GPU operator MIG manager (node label %s=true)' % MIG_MANAGER_LABEL)
    dynamic = []
    for item in resource_slices or ():
        name = ((item or {}).get('metadata') or {}).get('name')
        if ((item or {}).get('spec') or {}).get('sharedCounters') and name not in dynamic:
            dynamic.append(name)
    if dynamic:
        owners.append("NVIDIA's DRA driver with dynamic MIG (ResourceSlices %s publish partitionable devices)" % ', '.join(dynamic))
    return owners


def decision_retry(message, k8s, install_dependencies, drain_fallback):
    """Whether the role may decide again after the decision call failed with ``message``, and how.

    ``install_missing``: nvidia-ml-py or grpcio cannot be imported and the role may install them
    (mig_layout_install_dependencies); ``drain_instead``: on a Kubernetes node whose pod-resources
    cannot be read or name devices the host does not know, the user allowed a drain instead
    (mig_layout_k8s_drain_fallback); ``pod_resources_off``: the retry decides without pod-resources
    (it drains), which only a drain without a pending install does: with the package installed the
    retry reads them. Neither: the failure stands.
    """
    message = message or ''
    install_missing = bool(install_dependencies) and (PYNVML_PACKAGE in message or GRPC_MISSING in message)
    drain_instead = bool(k8s) and bool(drain_fallback) and (PODS_UNREADABLE in message or PODS_UNKNOWN in message)
    return {'install_missing': install_missing, 'drain_instead': drain_instead,
            'pod_resources_off': drain_instead and not install_missing,
            'retry': install_missing or drain_instead}


def component_labels(components):
    """The deploy label of each component (``device-plugin`` -> ``nvidia.com/gpu.deploy.device-plugin``)."""
    labels = []
    for component in components or ():
        if not isinstance(component, str) or not component or '/' in component or '=' in component:
            raise HandoverError('mig_layout_k8s_paused_components: %r is not a component name' % (component,))
        labels.append(DEPLOY_PREFIX + component)
    return labels


# How often the role lists the node's pods while it waits for the paused components' pods to go (seconds).
PAUSE_POLL_SECONDS = 2


class ComponentPause(object):
    """Which GPU components to pause and what to restore, from the node's labels as found.

    A component whose label is absent is not deployed by label on this node: left alone. ``false`` is
    set by someone else (the operator's user): left alone. ``paused-for-mig-change`` was left by a run
    that died: paused now, and restored to ``true``. Any other value is paused and restored as found.
    ``pause_timeout`` (mig_layout_k8s_pause_timeout, seconds): how long the role waits for the paused
    components' pods to be deleted; ``0`` means **do not pause** (no label changes, nothing to wait for: a
    component still holding a MIG device makes the destroy fail with NVML_ERROR_IN_USE, and the device
    plugin is not restarted, so the new advertisement is not awaited in vain only if it restarts by itself).
    A pause is never left unawaited. A negative timeout is refused.
    """

    def __init__(self, labels, components=DEFAULT_COMPONENTS, pause_timeout=300):
        labels = labels or {}
        self.pause = {}
        self.restore = {}
        self.left_alone = []
        if isinstance(pause_timeout, str) and pause_timeout.strip().isdigit():
            pause_timeout = int(pause_timeout)
        if isinstance(pause_timeout, bool) or not isinstance(pause_timeout, int) or pause_timeout < 0:
            raise HandoverError('mig_layout_k8s_pause_timeout must be a whole number of seconds >= 0 (0: do not pause '
                                'the GPU components), not %r' % (pause_timeout,))
        self.pause_timeout = pause_timeout
        # At least one listing, then one every PAUSE_POLL_SECONDS until the timeout.
        self.wait_retries = max(1, -(-pause_timeout // PAUSE_POLL_SECONDS))
        component_keys = component_labels(components)
        if pause_timeout == 0:
            self.left_alone = [key for key in component_keys if key in labels]
            return
        for key in component_keys:
            value = labels.get(key)
            if value is None:
                continue
            if value == 'false':
                self.left_alone.append(key)
                continue
            self.pause[key] = PAUSED
            self.restore[key] = 'true' if value == PAUSED else value

    def as_dict(self):
        return {'pause': self.pause, 'restore': self.restore, 'left_alone': self.left_alone,
                'pause_timeout': self.pause_timeout, 'wait_retries': self.wait_retries}


def paused_pods_left(pods, paused_labels):
    """The pods (namespace/name) still on the node that the paused labels schedule there.

    The GPU operator's DaemonSets select their nodes by ``nvidia.com/gpu.deploy.<component>=true``;
    once the label is paused the DaemonSet controller deletes their pods, and the change waits until
    they are gone (a pod being deleted still counts: it may still hold a GPU).
    """
    paused = set(paused_labels or ())
    return sorted(pod_key(pod) for pod in pods or [] if paused & _selector_keys(pod))


def paused_wait(listed, paused_labels, node='', timeout=0):
    """Where the wait for the paused components' pods stands, from the role's k8s_info result ``listed``.

    ``done``: the pods were listed and none a paused label schedules is left. ``problem``: why the change must not
    go on: the listing failed (an error is not "no pods": a DCGM still holding a MIG device would make the destroy
    fail half-way), or pods are left after the timeout. Nothing paused (``paused_labels`` empty): done, no problem.
    """
    if not paused_labels:
        return {'done': True, 'left': [], 'problem': None}
    listed = listed or {}
    if listed.get('skipped'):
        return {'done': False, 'left': [], 'problem': None}
    if not isinstance(listed.get('resources'), list):
        why = listed.get('msg') or listed.get('error') or 'no answer'
        return {'done': False, 'left': [], 'problem': (
            "listing the pods of node %s failed (%s), so whether the paused GPU components' pods are gone is unknown; "
            'no GPU was changed' % (node, str(why).strip()))}
    left = paused_pods_left(listed['resources'], paused_labels)
    problem = None
    if left:
        problem = ("the paused GPU components' pod(s) %s still run on node %s %s s (mig_layout_k8s_pause_timeout) after "
                   'their labels were set to %s; no GPU was changed' % (', '.join(left), node, timeout, PAUSED))
    return {'done': not left, 'left': left, 'problem': problem}


class LayoutRequest(object):
    """The layout a run applies: the role's, or (opt-in) the one the node's nvidia.com/mig.config requests.

    As with the GPU operator, ``kubectl label node N nvidia.com/mig.config=<layout> --overwrite`` is a
    request the next run honours when ``follow_label``; a label naming no layout of the catalog is
    refused (nothing changed). Either way the run sets the label to what it applies before the change.
    """

    def __init__(self, labels, configured, follow_label, layouts):
        label = (labels or {}).get(CONFIG_LABEL)
        known = sorted(layouts or ())
        self._problem = None
        if follow_label and label:
            self.name = label
            self.source = 'label'
            self.reason = 'node label %s=%s requests it (mig_layout_k8s_follow_config_label=true)' % (CONFIG_LABEL, label)
            if label not in known:
                self._problem = ('node label %s=%s names no layout of the catalog (%s): nothing was changed'
                                 % (CONFIG_LABEL, label, ', '.join(known)))
        else:
            self.name = configured
            self.source = 'role'
            self.reason = 'mig_layout_name=%s' % configured
        self.relabel = label != self.name

    def problem(self):
        return self._problem

    def refusal(self):
        """The node patch of a refused request: state failed with the reason, so the new label never stands next to
        an old ``success`` (None when the request is not refused)."""
        if self._problem is None:
            return None
        return {'metadata': {'labels': {STATE_LABEL: 'failed'}, 'annotations': {FAILURE_ANNOTATION: truncate(self._problem, 4096)}}}

    def as_dict(self):
        return {'name': self.name, 'source': self.source, 'reason': self.reason, 'relabel': self.relabel, 'problem': self.problem(),
                'refusal': self.refusal()}


class NodeHandover(object):
    """The node's labels, annotations and cordon through a change, from the node as found before it.

    ``start``: pending, the requested layout, the components paused, the cordon mark (only when the run
    cordons: a node an operator cordoned stays cordoned afterwards). ``success``: components back,
    success, marks dropped, uncordoned unless cordoned by someone else. A failure: failure().
    ``cordon`` false (a create-only change, SwitchMode.cordon): the run never cordons, so it never marks
    and never uncordons the node either (a cordon someone sets meanwhile stays).
    """

    def __init__(self, node, layout, components=DEFAULT_COMPONENTS, cordon=True, pause_timeout=300):
        if not node or not (node.get('metadata') or {}).get('name'):
            raise HandoverError('no Node object to hand over')
        metadata = node['metadata']
        self.name = metadata['name']
        self.layout = layout
        self.cordon = bool(cordon)
        self.labels = dict(metadata.get('labels') or {})
        annotations = metadata.get('annotations') or {}
        self.pause = ComponentPause(self.labels, components, pause_timeout)
        # A node an earlier failed change left cordoned (its mark) was schedulable before that change.
        self.cordoned_by_others = bool((node.get('spec') or {}).get('unschedulable')) and CORDON_ANNOTATION not in annotations

    def _labels(self, state, restore):
        labels = dict(self.pause.restore if restore else self.pause.pause)
        labels[STATE_LABEL] = state
        return labels

    def start(self):
        labels = self._labels('pending', restore=False)
        labels[CONFIG_LABEL] = self.layout
        annotations = {CORDON_ANNOTATION: self.layout} if self.uncordon else {}
        return {'metadata': {'labels': labels, 'annotations': annotations}}

    @property
    def uncordon(self):
        """Whether the run cordons the node and uncordons it afterwards (not one someone else had cordoned)."""
        return self.cordon and not self.cordoned_by_others

    def rebooting(self):
        return {'metadata': {'labels': {STATE_LABEL: 'rebooting'}}}

    def success(self):
        labels = self._labels('success', restore=True)
        labels[CONFIG_LABEL] = self.layout
        return {'metadata': {'labels': labels, 'annotations': {CORDON_ANNOTATION: None, FAILURE_ANNOTATION: None}}}

    def as_dict(self):
        return {'name': self.name, 'layout': self.layout, 'components': self.pause.as_dict(), 'cordon': self.cordon,
                'cordoned_by_others': self.cordoned_by_others, 'uncordon': self.uncordon, 'start': self.start(), 'rebooting': self.rebooting(),
                'success': self.success()}


def gpu_touched(may_have_changed, applied=None):
    """Whether a failed change may have changed a GPU: not before the apply (``may_have_changed`` false), nor when
    the apply's own failure says no NVML change was made (nvidia_mig_layout's ``gpus_changed`` false: refused
    before the first mutating call). Anything else, an unreachable host included, may have."""
    if not may_have_changed:
        return False
    applied = applied or {}
    return not (applied.get('failed') and applied.get('gpus_changed') is False)


def failure(handover, reason, gpu_changed, applied=None):
    """{patch, uncordon} for a failed change, from a NodeHandover's as_dict() taken at its start.

    ``gpu_changed``: the apply had started; ``applied``: its result, whose ``gpus_changed`` false (refused before any
    NVML change) hands the node back as if it had not (:func:`gpu_touched`).

    Components back, state failed, the reason in an annotation (cut at 4 KiB; annotations hold 256 KiB).
    The node stays cordoned only when a GPU may have changed (the scheduler's view may be wrong);
    otherwise the cordon mark goes and the node is uncordoned unless someone else had cordoned it.
    A run that never cordoned (``cordon`` false: create-only) never uncordons (``cordoned`` false).
    """
    gpu_changed = gpu_touched(gpu_changed, applied)
    cordoned = handover.get('cordon', True)
    annotations = {FAILURE_ANNOTATION: truncate(reason, 4096)}
    if not gpu_changed:
        annotations[CORDON_ANNOTATION] = None
    labels = dict(handover['components']['restore'])
    labels[STATE_LABEL] = 'failed'
    return {'patch': {'metadata': {'labels': labels, 'annotations': annotations}}, 'cordoned': cordoned,
            'uncordon': cordoned and not handover['cordoned_by_others'] and not gpu_changed}


def failure_outcome(failed, node, write_error=None, uncordon_error=None):
    """What the node shows after a failed change, as the sentence that ends the role's failure message.

    ``failed`` is failure()'s value; ``write_error`` the error of writing its patch (None: written),
    ``uncordon_error`` that of uncordoning (None: uncordoned, or not tried). A write that failed is
    said, and so is what the node may still show: the run's pending state and paused components.
    """
    state = 'nvidia.com/mig.config.state=failed'
    if write_error is not None:
        still = 'it may still say pending, with its GPU components paused'
        if not failed['uncordon'] and failed.get('cordoned', True):
            still += ' and cordoned'
        elif uncordon_error is not None:
            still += '; uncordoning it failed too (%s)' % (uncordon_error or 'unknown error')
        return 'writing %s to node %s also failed (%s): %s.' % (state, node, write_error or 'unknown error', still)
    if not failed.get('cordoned', True):
        return 'the node was not cordoned (the change only created instances) and says %s.' % state
    if not failed['uncordon']:
        return 'the node stays cordoned with %s.' % state
    if uncordon_error is not None:
        return 'no GPU was changed; uncordoning node %s failed (%s), it says %s.' % (node, uncordon_error or 'unknown error', state)
    return 'no GPU was changed, so the node is schedulable again, with %s.' % state


def recovery(node, layout, components=DEFAULT_COMPONENTS):
    """What a node whose host already holds ``layout`` needs: None, or {restore, patch, uncordon, await_advertisement}.

    An earlier run that died half-way (or failed after a GPU changed) left it paused, pending or
    failed, cordoned with the role's mark, or labelled for another layout. ``restore``: the paused
    components' labels back (None: none paused); ``await_advertisement``: the node goes back into
    service (uncordoned, or its device plugin restarted), so the kubelet must first advertise what the
    GPUs hold, as after a change (k8s_post); ``patch``: then the layout, ``success`` and the marks dropped.
    """
    metadata = (node or {}).get('metadata') or {}
    labels = metadata.get('labels') or {}
    annotations = metadata.get('annotations') or {}
    restore = dict((key, 'true') for key in component_labels(components) if labels.get(key) == PAUSED)
    marks = dict((key, None) for key in (CORDON_ANNOTATION, FAILURE_ANNOTATION) if key in annotations)
    uncordon = CORDON_ANNOTATION in annotations
    if not restore and not marks and labels.get(CONFIG_LABEL) == layout and labels.get(STATE_LABEL) == 'success':
        return None
    patch = {'metadata': {'labels': {CONFIG_LABEL: layout, STATE_LABEL: 'success'}, 'annotations': marks}}
    return {'restore': {'metadata': {'labels': restore}} if restore else None, 'patch': patch, 'uncordon': uncordon,
            'await_advertisement': uncordon or bool(restore) or labels.get(STATE_LABEL) not in (None, 'success')}

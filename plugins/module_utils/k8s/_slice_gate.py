# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The slice gate: the MutatingAdmissionPolicy and its binding that add the scheduling gate ``gpufleet.mig/slice`` to
the pods that ask for MIG resources, so that nobody but gpufleet's event source decides which instance serves them
(a gated pod stays out of kube-scheduler until every gate is removed; its node affinity may still be narrowed:
Kubernetes "Pod Scheduling Readiness", GA in 1.30).

Which pods: those whose containers or init containers request or limit a resource named ``nvidia.com/mig-...`` (every
name NVIDIA's device plugin gives a MIG device with the mixed strategy, ``.shared`` ones included) or one of the names
the device plugin's time-slicing ``rename`` gives a MIG resource (the plugin writes them under ``nvidia.com/``), plus
the names given as extra. A pod that already carries the gate (its author added it) is left as it is.

Which API: ``admissionregistration.k8s.io/v1`` (GA in Kubernetes 1.36), else ``v1beta1`` (beta in 1.34, behind the
``MutatingAdmissionPolicy`` feature gate and served only with ``--runtime-config
admissionregistration.k8s.io/v1beta1=true``); a cluster that serves neither is refused in one line.

Pure Python, no Ansible imports: the filter gpufleet.mig.mig_slice_gate (the gpu_tenancy role) calls it, and the
event source reads the gate's name here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import MIG_PREFIX, profile_of_resource

SLICE_GATE = 'gpufleet.mig/slice'
# The node the event source pinned a pod to, written with the patch that pins it: the source's own record of its pins
# (a pod its author pinned by affinity is not the source's).
PIN_ANNOTATION = 'gpufleet.mig/slice-node'
GROUP = 'admissionregistration.k8s.io'
# Preferred first: the GA version where the cluster serves it.
API_VERSIONS = (GROUP + '/v1', GROUP + '/v1beta1')
POLICY_NAME = 'gpufleet-mig-slice-gate'
# The plugin prefixes every renamed resource with nvidia.com/ (api/config/v1 ResourceNamePrefix).
RENAME_PREFIX = 'nvidia.com/'
# A qualified extended resource name: prefix/name, each part as Kubernetes validates it (IsQualifiedName).
_RESOURCE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z')
_DNS_LABEL = re.compile(r'^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z')


class SliceGateError(GpufleetError):
    """A setting the gate cannot be built from, or a cluster that serves no MutatingAdmissionPolicy API."""


def gated_resources(time_slicing=None, extra=None):
    """The exact resource names gated besides the ``nvidia.com/mig-`` prefix: the ``rename`` of each time-slicing
    entry of a MIG resource (the device_plugin role's ``device_plugin_time_slicing``), then ``extra``; sorted, once
    each. Raises SliceGateError for a name Kubernetes would not take as an extended resource."""
    names = set()
    for entry in time_slicing or []:
        if not isinstance(entry, dict):
            raise SliceGateError('time-slicing entries are mappings with name and replicas, got %r' % (entry,))
        rename = entry.get('rename')
        if rename and profile_of_resource(entry.get('name')) is not None:
            names.add(rename if '/' in rename else RENAME_PREFIX + rename)
    for name in extra or []:
        names.add(name)
    for name in sorted(names, key=str):
        if not isinstance(name, str) or not _RESOURCE.match(name):
            raise SliceGateError('%r is not a resource name a pod can request (prefix/name, such as nvidia.com/small-gpu)' % (name,))
    return sorted(names)


def asks_for_gated_resource(pod, resources):
    """The rule of the policy's match condition, in Python: whether ``pod`` (a Pod object) asks for a MIG resource or
    one of ``resources`` in a container or init container, by request or limit. The unit tests hold the policy's CEL
    to this."""
    spec = pod.get('spec') or {}
    for container in (spec.get('containers') or []) + (spec.get('initContainers') or []):
        wanted = container.get('resources') or {}
        for name in list(wanted.get('limits') or {}) + list(wanted.get('requests') or {}):
            if name.startswith(MIG_PREFIX) or name in resources:
                return True
    return False


def has_gate(pod):
    """Whether ``pod`` carries the slice gate."""
    return any(gate.get('name') == SLICE_GATE for gate in (pod.get('spec') or {}).get('schedulingGates') or [])


def _cel_string(text):
    # JSON's string escapes are valid CEL string escapes.
    return json.dumps(text)


def match_expression(resources):
    """The policy's CEL match condition: a container or init container that asks for a gated resource."""
    names = '[%s]' % ', '.join(_cel_string(name) for name in resources)
    asks = 'r.startsWith(%s) || r in %s' % (_cel_string(MIG_PREFIX), names)
    container = ('(has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, {asks})) || '
                 '(has(c.resources.requests) && c.resources.requests.exists(r, {asks}))))').format(asks=asks)
    return ('object.spec.containers.exists(c, {c}) || '
            '(has(object.spec.initContainers) && object.spec.initContainers.exists(c, {c}))').format(c=container)


def not_gated_expression():
    """The policy's CEL match condition: the pod does not carry the gate yet (its author may have added it)."""
    return '!(has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, g.name == %s))' % _cel_string(SLICE_GATE)


def not_bound_expression():
    """The policy's CEL match condition: the pod does not name its node. Kubernetes refuses to create a pod with both
    ``spec.nodeName`` and a scheduling gate ("spec.nodeName: Forbidden: cannot be set until all schedulingGates have
    been cleared", ValidatePodCreate in pkg/apis/core/validation), so gating one would refuse it; such a pod skips
    kube-scheduler, and the gated queue has nothing to decide for it."""
    return "!has(object.spec.nodeName) || object.spec.nodeName == ''"


def apply_expression():
    """The policy's mutation, an apply configuration: the gate merged into the pod's gates. schedulingGates is a list
    map keyed by name, so the pod's other gates stay as they are. (Not a JSON patch: kube-apiserver 1.34.4 panics
    converting a JSONPatch value that is a list of objects, as adding the whole list needs.)"""
    return 'Object{spec: Object.spec{schedulingGates: [Object.spec.schedulingGates{name: %s}]}}' % _cel_string(SLICE_GATE)


def namespace_selector(namespaces=None, selector=None):
    """The binding's namespaceSelector: ``selector`` (a LabelSelector) and, when ``namespaces`` lists names, only
    those (their ``kubernetes.io/metadata.name`` label, which the API server sets on every namespace). Both empty:
    every namespace."""
    selector = dict(selector or {})
    unknown = sorted(set(selector) - {'matchLabels', 'matchExpressions'})
    if unknown:
        raise SliceGateError('the namespace selector takes matchLabels and matchExpressions, not %s' % ', '.join(unknown))
    for name in namespaces or []:
        if not isinstance(name, str) or not _DNS_LABEL.match(name):
            raise SliceGateError('%r is not a namespace name (a DNS label)' % (name,))
    if namespaces:
        selector['matchExpressions'] = list(selector.get('matchExpressions') or []) + [
            {'key': 'kubernetes.io/metadata.name', 'operator': 'In', 'values': sorted(set(namespaces))}]
    return selector


def served_api_version(found):
    """The MutatingAdmissionPolicy API version to use, out of API discovery: ``found`` maps each of API_VERSIONS to
    whether the cluster serves the kind MutatingAdmissionPolicy in it (kubernetes.core.k8s_info's ``api_found``; the
    group version alone says nothing, 1.34 serves admissionregistration.k8s.io/v1 for the webhooks and
    ValidatingAdmissionPolicy). Raises SliceGateError in one line when it serves neither."""
    for version in API_VERSIONS:
        if found.get(version):
            return version
    raise SliceGateError('the cluster serves no MutatingAdmissionPolicy API (%s): Kubernetes 1.36 serves v1; on 1.34 and 1.35 '
                         'start kube-apiserver with --feature-gates MutatingAdmissionPolicy=true and --runtime-config '
                         '%s/v1beta1=true; nothing was changed' % (' or '.join(API_VERSIONS), GROUP))


def slice_gate_objects(api_version, resources=None, namespaces=None, selector=None, labels=None, name=POLICY_NAME):
    """[MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding] in ``api_version``."""
    if api_version not in API_VERSIONS:
        raise SliceGateError('api_version must be one of %s, got %r' % (', '.join(API_VERSIONS), api_version))
    metadata = {'name': name, 'labels': dict(labels or {})}
    policy = {
        'apiVersion': api_version, 'kind': 'MutatingAdmissionPolicy', 'metadata': dict(metadata),
        'spec': {
            'matchConstraints': {'resourceRules': [
                {'apiGroups': [''], 'apiVersions': ['v1'], 'operations': ['CREATE'], 'resources': ['pods']}]},
            'matchConditions': [
                {'name': 'asks-for-mig', 'expression': match_expression(resources or [])},
                {'name': 'not-gated-yet', 'expression': not_gated_expression()},
                {'name': 'not-bound', 'expression': not_bound_expression()}],
            # A gate is only ever added at creation (Kubernetes refuses new gates later): if the policy cannot run,
            # the pod is refused rather than admitted ungated behind the event source's back.
            'failurePolicy': 'Fail',
            'reinvocationPolicy': 'Never',
            'mutations': [{'patchType': 'ApplyConfiguration', 'applyConfiguration': {'expression': apply_expression()}}],
        },
    }
    binding = {
        'apiVersion': api_version, 'kind': 'MutatingAdmissionPolicyBinding', 'metadata': dict(metadata),
        'spec': {'policyName': name,
                 'matchResources': {'namespaceSelector': namespace_selector(namespaces, selector)}},
    }
    return [policy, binding]


def release_patch(pod, node=None):
    """The strategic merge patch that takes the slice gate off ``pod`` and, with ``node``, narrows its required node
    affinity to that node: the event source's hand-over of a decided pod to kube-scheduler.

    The gate goes by the list map's ``$patch: delete`` directive (schedulingGates merges by name): the pod's other
    gates stay. A gated pod's required node affinity may only gain requirements (Kubernetes "Pod Scheduling
    Readiness", mutable scheduling directives), so each of its terms keeps what it has and gains ``metadata.name In
    [node]``; nodeSelectorTerms has no merge key, so the patch carries every term. The annotation
    :data:`PIN_ANNOTATION` records the node."""
    patch = {'spec': {'schedulingGates': [{'$patch': 'delete', 'name': SLICE_GATE}]}}
    if node is not None:
        required = ((((pod.get('spec') or {}).get('affinity') or {}).get('nodeAffinity') or {})
                    .get('requiredDuringSchedulingIgnoredDuringExecution') or {})
        pinned = {'key': 'metadata.name', 'operator': 'In', 'values': [node]}
        terms = [dict(term, matchFields=list(term.get('matchFields') or []) + [pinned])
                 for term in required.get('nodeSelectorTerms') or []] or [{'matchFields': [pinned]}]
        patch['spec']['affinity'] = {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': terms}}}
        patch['metadata'] = {'annotations': {PIN_ANNOTATION: node}}
    return patch


def pinned_node(pod):
    """The node :func:`release_patch` pinned ``pod`` to (its annotation :data:`PIN_ANNOTATION`), or None."""
    return ((pod.get('metadata') or {}).get('annotations') or {}).get(PIN_ANNOTATION) or None

# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Whether a pod may run on a node, as kube-scheduler's filters decide it, so that the demand planner
never gives a pod a MIG slice on a node the scheduler will not bind it to.

Pure Python: no NVML, no Ansible imports. The rules follow Kubernetes' own code (v1.34):

- NodeAffinity (pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go, with
  staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go): every
  ``spec.nodeSelector`` pair equals a node label, and, when the pod has required node affinity, at least
  one of its ``nodeSelectorTerms`` matches; a term matches when all its ``matchExpressions`` (node labels:
  In, NotIn, Exists, DoesNotExist, Gt, Lt as apimachinery's labels.Requirement.Matches reads them) and
  all its ``matchFields`` (only ``metadata.name``, In or NotIn) hold; an empty term matches nothing.
  Preferred affinity only scores, so it is not a constraint.
- TaintToleration (pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go, with
  Toleration.ToleratesTaint of k8s.io/api/core/v1/toleration.go): every NoSchedule and NoExecute taint of
  the node is tolerated; PreferNoSchedule only scores.
- NodeResourcesFit (pkg/scheduler/framework/plugins/noderesources/fit.go, the pod's request as
  k8s.io/component-helpers/resource PodRequests computes it): for CPU and memory the pod asks for more
  than zero of, its request fits in the node's allocatable minus what the pods bound to the node
  (not Succeeded nor Failed) request.

The refusal texts are kube-scheduler's own, so the pod's Event reads like its FailedScheduling message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import decimal
import re
from dataclasses import dataclass

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError

# kube-scheduler's reasons (node_affinity.go ErrReasonPod, taint_toleration.go, fit.go "Insufficient <resource>")
AFFINITY_REFUSAL = "node(s) didn't match Pod's node affinity/selector"
NOT_A_NODE_REFUSAL = 'not a Kubernetes node (no Node object)'

# resource.Quantity's suffixes (k8s.io/apimachinery/pkg/api/resource/suffix.go)
_SUFFIXES = {'': 1, 'n': decimal.Decimal('1e-9'), 'u': decimal.Decimal('1e-6'), 'm': decimal.Decimal('1e-3'),
             'k': 10 ** 3, 'M': 10 ** 6, 'G': 10 ** 9, 'T': 10 ** 12, 'P': 10 ** 15, 'E': 10 ** 18,
             'Ki': 2 ** 10, 'Mi': 2 ** 20, 'Gi': 2 ** 30, 'Ti': 2 ** 40, 'Pi': 2 ** 50, 'Ei': 2 ** 60}
_QUANTITY = re.compile(r'^([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$')
_SCHEDULING_EFFECTS = ('NoSchedule', 'NoExecute')
_TERMINAL_PHASES = ('Succeeded', 'Failed')


class NodeFitError(GpufleetError, ValueError):
    """A pod or node object the fit rules cannot read; the message is one line naming what."""


def quantity(value, what):
    """A Kubernetes quantity (``500m``, ``2``, ``1.5Gi``, ``1e9``) as a Decimal; refused with one line."""
    if isinstance(value, bool):
        raise NodeFitError('%s: %r is not a quantity' % (what, value))
    if isinstance(value, (int, float)):
        return decimal.Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise NodeFitError('%s: %r is not a quantity' % (what, value))
    return decimal.Decimal(match.group(1)) * _SUFFIXES[match.group(2) or '']


def _cpu_memory(resources, what):
    """(CPU millicores, memory bytes) of one container's requests; a limit alone stands for its request, as the
    API server's defaulting sets it."""
    resources = resources or {}
    merged = dict(resources.get('limits') or {})
    merged.update(resources.get('requests') or {})
    cpu = merged.get('cpu')
    memory = merged.get('memory')
    return (int((quantity(cpu, '%s cpu' % what) * 1000).to_integral_value(decimal.ROUND_CEILING)) if cpu is not None else 0,
            int(quantity(memory, '%s memory' % what).to_integral_value(decimal.ROUND_CEILING)) if memory is not None else 0)


def pod_cpu_memory(spec):
    """(CPU millicores, memory bytes) a pod requests, as PodRequests computes it: the containers added up, or the
    largest init container (with the restartable, sidecar, init containers started before it) if more, then the
    pod overhead added."""
    total = [0, 0]
    for container in spec.get('containers') or []:
        request = _cpu_memory(container.get('resources'), 'container %s' % container.get('name', '?'))
        total = [t + r for t, r in zip(total, request)]
    sidecars = [0, 0]
    init_peak = [0, 0]
    for container in spec.get('initContainers') or []:
        request = _cpu_memory(container.get('resources'), 'init container %s' % container.get('name', '?'))
        if container.get('restartPolicy') == 'Always':
            total = [t + r for t, r in zip(total, request)]
            sidecars = [s + r for s, r in zip(sidecars, request)]
            current = sidecars
        else:
            current = [s + r for s, r in zip(sidecars, request)]
        init_peak = [max(p, c) for p, c in zip(init_peak, current)]
    total = [max(t, p) for t, p in zip(total, init_peak)]
    overhead = _cpu_memory({'requests': spec.get('overhead') or {}}, 'overhead')
    return (total[0] + overhead[0], total[1] + overhead[1])


@dataclass(frozen=True)
class PodPlacementRules(object):
    """What a pod requires of its node: label pairs, required affinity terms (None: none), tolerations, CPU and memory."""
    node_selector: tuple = ()
    required_terms: tuple = None
    tolerations: tuple = ()
    cpu_millis: int = 0
    memory_bytes: int = 0

    @classmethod
    def of_pod(cls, pod):
        """The rules of a Kubernetes Pod object."""
        spec = pod.get('spec') or {}
        selector = spec.get('nodeSelector') or {}
        if not isinstance(selector, dict):
            raise NodeFitError('spec.nodeSelector must map label to value')
        affinity = ((spec.get('affinity') or {}).get('nodeAffinity') or {}).get('requiredDuringSchedulingIgnoredDuringExecution')
        terms = None
        if affinity is not None:
            terms = tuple(_term(term) for term in (affinity.get('nodeSelectorTerms') or []))
        tolerations = tuple(_toleration(t) for t in spec.get('tolerations') or [])
        cpu, memory = pod_cpu_memory(spec)
        return cls(tuple(sorted((str(k), str(v)) for k, v in selector.items())), terms, tolerations, cpu, memory)


def _requirement(entry, what):
    if not isinstance(entry, dict) or 'key' not in entry or 'operator' not in entry:
        raise NodeFitError('%s: every requirement needs key and operator' % what)
    operator = entry['operator']
    if operator not in ('In', 'NotIn', 'Exists', 'DoesNotExist', 'Gt', 'Lt'):
        raise NodeFitError('%s: unknown operator %r' % (what, operator))
    return (str(entry['key']), operator, tuple(str(v) for v in entry.get('values') or ()))


def _term(term):
    term = term or {}
    return (tuple(_requirement(e, 'nodeSelectorTerms matchExpressions') for e in term.get('matchExpressions') or []),
            tuple(_requirement(e, 'nodeSelectorTerms matchFields') for e in term.get('matchFields') or []))


def _toleration(entry):
    if not isinstance(entry, dict):
        raise NodeFitError('spec.tolerations: every toleration must be a mapping')
    return (entry.get('key') or '', entry.get('operator') or 'Equal', entry.get('value') or '', entry.get('effect') or '')


@dataclass(frozen=True)
class NodeRoom(object):
    """What a node offers a pod: its name, labels, scheduling taints, and the CPU and memory left (None: unknown)."""
    name: str
    labels: tuple = ()
    taints: tuple = ()
    cpu_millis_free: int = None
    memory_bytes_free: int = None

    @classmethod
    def of_node(cls, node, pods=()):
        """The room of a Kubernetes Node object, less what the ``pods`` bound to it (``spec.nodeName``) request."""
        metadata = node.get('metadata') or {}
        name = metadata.get('name') or ''
        taints = tuple(sorted((t.get('key') or '', t.get('value') or '', t.get('effect') or '')
                              for t in (node.get('spec') or {}).get('taints') or []
                              if t.get('effect') in _SCHEDULING_EFFECTS))
        allocatable = (node.get('status') or {}).get('allocatable') or {}
        used = [0, 0]
        for pod in pods or ():
            if (pod.get('spec') or {}).get('nodeName') == name and (pod.get('status') or {}).get('phase') not in _TERMINAL_PHASES:
                request = pod_cpu_memory(pod.get('spec') or {})
                used = [u + r for u, r in zip(used, request)]
        cpu = memory = None
        if 'cpu' in allocatable:
            cpu = int((quantity(allocatable['cpu'], 'node %s allocatable cpu' % name) * 1000).to_integral_value(decimal.ROUND_FLOOR)) - used[0]
        if 'memory' in allocatable:
            memory = int(quantity(allocatable['memory'], 'node %s allocatable memory' % name).to_integral_value(decimal.ROUND_FLOOR)) - used[1]
        return cls(name, tuple(sorted((str(k), str(v)) for k, v in (metadata.get('labels') or {}).items())), taints, cpu, memory)

    def taken(self, rules):
        """The room left once a pod with ``rules`` is bound here."""
        return NodeRoom(self.name, self.labels, self.taints,
                        None if self.cpu_millis_free is None else self.cpu_millis_free - rules.cpu_millis,
                        None if self.memory_bytes_free is None else self.memory_bytes_free - rules.memory_bytes)


def _int64(text):
    try:
        return int(text)
    except ValueError:
        return None


def _expression_holds(requirement, labels):
    key, operator, values = requirement
    if operator == 'Exists':
        return key in labels
    if operator == 'DoesNotExist':
        return key not in labels
    if operator == 'NotIn':
        return key not in labels or labels[key] not in values
    if key not in labels:
        return False
    if operator == 'In':
        return labels[key] in values
    # Gt and Lt: the label and the one value compare as integers; either not an integer matches nothing.
    have = _int64(labels[key])
    want = _int64(values[0]) if len(values) == 1 else None
    if have is None or want is None:
        return False
    return have > want if operator == 'Gt' else have < want


def _term_matches(term, node):
    expressions, fields = term
    if not expressions and not fields:
        return False   # an empty term matches no node
    labels = dict(node.labels)
    if not all(_expression_holds(e, labels) for e in expressions):
        return False
    return all(_expression_holds(f, {'metadata.name': node.name} if f[0] == 'metadata.name' else {}) for f in fields)


def _tolerates(toleration, taint):
    key, operator, value, effect = toleration
    taint_key, taint_value, taint_effect = taint
    if effect and effect != taint_effect:
        return False
    if key and key != taint_key:
        return False
    if operator == 'Exists':
        return True   # an empty key with Exists tolerates every taint
    return value == taint_value


def refusal(rules, node):
    """Why a pod with ``rules`` may not run on ``node`` (a :class:`NodeRoom`, or None for a host that is not a
    Kubernetes node), in kube-scheduler's words; None when it may."""
    if node is None:
        return NOT_A_NODE_REFUSAL
    labels = dict(node.labels)
    if any(labels.get(key) != value for key, value in rules.node_selector):
        return AFFINITY_REFUSAL
    if rules.required_terms is not None and not any(_term_matches(term, node) for term in rules.required_terms):
        return AFFINITY_REFUSAL
    for taint in node.taints:
        if not any(_tolerates(t, taint) for t in rules.tolerations):
            return "node(s) had untolerated taint {%s: %s}" % (taint[0], taint[1]) if taint[1] else \
                "node(s) had untolerated taint {%s}" % taint[0]
    short = []
    if rules.cpu_millis > 0 and node.cpu_millis_free is not None and rules.cpu_millis > node.cpu_millis_free:
        short.append('Insufficient cpu')
    if rules.memory_bytes > 0 and node.memory_bytes_free is not None and rules.memory_bytes > node.memory_bytes_free:
        short.append('Insufficient memory')
    return ', '.join(short) or None

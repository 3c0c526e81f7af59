# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Which PodDisruptionBudgets the pods to evict fall under, and whether every budget allows all of its pods at once.

The Eviction API checks one pod at a time, and a dry run does not use up a disruption: two replicas under
``maxUnavailable: 1`` both pass their dry runs, and the real pass evicts one and is refused the other. So the pods
are grouped here by the budget that guards each, as the API server decides it, and each group is compared with
its budget's ``status.disruptionsAllowed`` before the first eviction; one budget that cannot allow its whole group
refuses every eviction (all or none).

What the API server does, from k8s.io/kubernetes pkg/registry/core/pod/storage/eviction.go (EvictionREST.Create,
getPodDisruptionBudgets, checkAndDecrement):

- a pod in phase Succeeded, Failed or Pending, or already being deleted, is deleted without any budget (canIgnorePDB);
- the budgets of a pod are those of its namespace whose selector (metav1.LabelSelectorAsSelector) matches its labels;
  a budget with a missing, empty or invalid selector guards nothing;
- a pod under more than one budget is refused with HTTP 500 "This pod has more than one PodDisruptionBudget, which
  the eviction subresource does not support.";
- a pod that is not Ready is let go without using a disruption when its budget says
  ``unhealthyPodEvictionPolicy: AlwaysAllow``, or when ``status.currentHealthy >= status.desiredHealthy > 0``
  (IfHealthyBudget, the default; KEP-3017);
- otherwise the budget must be processed (``status.observedGeneration >= metadata.generation``, else 429), not
  negative (403), with at most 2000 ``status.disruptedPods`` (403), and allow a disruption (else 429); each real
  eviction takes one, a dry run none.

Pure Python (no Ansible, no Kubernetes client): gpufleet.mig.mig_pod_eviction reads the pods and the budgets and
hands their API objects in.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass
from typing import Optional, Tuple

# Phases and states the Eviction API deletes without asking any budget (eviction.go, canIgnorePDB).
PHASES_WITHOUT_BUDGET = ('Succeeded', 'Failed', 'Pending')
# eviction.go, MaxDisruptedPodSize: more evictions approved than the budget's controller has seen.
MAX_DISRUPTED_PODS = 2000
# policy/v1 PodDisruptionBudgetSpec.unhealthyPodEvictionPolicy.
ALWAYS_ALLOW = 'AlwaysAllow'
# k8s.io/apimachinery pkg/apis/meta/v1/helpers.go LabelSelectorAsSelector, and pkg/labels NewRequirement: In and
# NotIn need at least one value, Exists and DoesNotExist none; any other operator makes the selector invalid.
OPERATORS_WITH_VALUES = ('In', 'NotIn')
OPERATORS_WITHOUT_VALUES = ('Exists', 'DoesNotExist')
MORE_THAN_ONE_BUDGET = 'This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.'


def selector_requirements(selector):
    """A label selector (matchLabels, matchExpressions) as ((key, operator, values), ...), or None when it selects
    nothing: missing, empty (the Eviction API skips ``selector.Empty()``: "it should match nothing, not
    everything") or invalid (LabelSelectorAsSelector fails, and getPodDisruptionBudgets skips the budget)."""
    if not isinstance(selector, dict):
        return None
    match_labels = selector.get('matchLabels') or {}
    expressions = selector.get('matchExpressions') or []
    requirements = [(str(key), 'In', (str(value),)) for key, value in sorted(match_labels.items())]
    for expression in expressions:
        operator = expression.get('operator')
        values = tuple(str(value) for value in expression.get('values') or ())
        if operator in OPERATORS_WITH_VALUES and values:
            requirements.append((str(expression.get('key')), operator, values))
        elif operator in OPERATORS_WITHOUT_VALUES and not values:
            requirements.append((str(expression.get('key')), operator, ()))
        else:
            return None
    return tuple(requirements) or None


def requirements_match(requirements, labels):
    """Whether pod ``labels`` satisfy every requirement (pkg/labels Requirement.Matches): NotIn also matches a pod
    without the key."""
    if not requirements:
        return False
    for key, operator, values in requirements:
        has = key in labels
        if operator == 'In' and not (has and labels[key] in values):
            return False
        if operator == 'NotIn' and has and labels[key] in values:
            return False
        if operator == 'Exists' and not has:
            return False
        if operator == 'DoesNotExist' and has:
            return False
    return True


def _int(value):
    return int(value or 0)


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget as the Eviction API reads it."""

    namespace: str
    name: str
    requirements: Optional[Tuple[Tuple[str, str, Tuple[str, ...]], ...]]
    disruptions_allowed: int
    generation: int = 0
    observed_generation: int = 0
    current_healthy: int = 0
    desired_healthy: int = 0
    always_allow_unhealthy: bool = False
    disrupted_pods: int = 0
    # The message of condition DisruptionAllowed=False reason SyncFailed: its controller cannot compute the budget
    # (pkg/controller/disruption, failSafe), which keeps disruptionsAllowed at 0 until fixed.
    sync_failed: Optional[str] = None

    @classmethod
    def from_object(cls, pdb):
        metadata = pdb.get('metadata') or {}
        spec = pdb.get('spec') or {}
        status = pdb.get('status') or {}
        sync_failed = None
        for condition in status.get('conditions') or []:
            if condition.get('type') == 'DisruptionAllowed' and condition.get('reason') == 'SyncFailed':
                sync_failed = condition.get('message') or 'SyncFailed'
        return cls(
            namespace=metadata.get('namespace') or 'default', name=metadata.get('name'),
            requirements=selector_requirements(spec.get('selector')),
            disruptions_allowed=_int(status.get('disruptionsAllowed')),
            generation=_int(metadata.get('generation')), observed_generation=_int(status.get('observedGeneration')),
            current_healthy=_int(status.get('currentHealthy')), desired_healthy=_int(status.get('desiredHealthy')),
            always_allow_unhealthy=spec.get('unhealthyPodEvictionPolicy') == ALWAYS_ALLOW,
            disrupted_pods=len(status.get('disruptedPods') or {}), sync_failed=sync_failed)

    @property
    def key(self):
        return '%s/%s' % (self.namespace, self.name)

    def selects(self, pod):
        return pod.namespace == self.namespace and requirements_match(self.requirements, dict(pod.labels))

    def lets_unhealthy_go(self):
        """Whether a pod that is not Ready is evicted without using a disruption (eviction.go, KEP-3017)."""
        return self.always_allow_unhealthy or (self.current_healthy >= self.desired_healthy and self.desired_healthy > 0)


@dataclass(frozen=True)
class PodToEvict:
    """A pod to evict as the Eviction API reads it."""

    namespace: str
    name: str
    labels: Tuple[Tuple[str, str], ...] = ()
    phase: str = 'Running'
    ready: bool = True
    deleting: bool = False

    @classmethod
    def from_object(cls, pod):
        metadata = pod.get('metadata') or {}
        status = pod.get('status') or {}
        # k8s.io/kubernetes pkg/api/pod IsPodReady: condition Ready with status True.
        ready = any(c.get('type') == 'Ready' and c.get('status') == 'True' for c in status.get('conditions') or [])
        return cls(namespace=metadata.get('namespace') or 'default', name=metadata.get('name'),
                   labels=tuple(sorted((str(k), str(v)) for k, v in (metadata.get('labels') or {}).items())),
                   phase=status.get('phase') or '', ready=ready, deleting=bool(metadata.get('deletionTimestamp')))

    @property
    def key(self):
        return '%s/%s' % (self.namespace, self.name)

    def asks_budgets(self):
        """Whether the Eviction API consults its budgets at all (not canIgnorePDB)."""
        return self.phase not in PHASES_WITHOUT_BUDGET and not self.deleting


@dataclass(frozen=True)
class BudgetGroup:
    """One budget and the pods to evict under it: those whose eviction takes one of its disruptions, and the
    unhealthy ones it lets go without."""

    budget: Budget
    pods: Tuple[str, ...] = ()
    unhealthy: Tuple[str, ...] = ()

    def refusal(self):
        """Why the budget cannot allow all of its pods at once, or None; what the API would answer for the first
        pod it refuses."""
        budget = self.budget
        if not self.pods:
            return None
        named = '%d pod(s) to evict (%s)' % (len(self.pods), ', '.join(self.pods))
        if budget.observed_generation < budget.generation:
            return ('PodDisruptionBudget %s guards %s but its controller has not processed its latest spec yet '
                    '(status.observedGeneration %d < metadata.generation %d; the API answers 429)'
                    % (budget.key, named, budget.observed_generation, budget.generation))
        if budget.disruptions_allowed < 0:
            return ('PodDisruptionBudget %s guards %s and its status.disruptionsAllowed is negative (%d; the API answers 403)'
                    % (budget.key, named, budget.disruptions_allowed))
        if budget.disrupted_pods > MAX_DISRUPTED_PODS:
            return ('PodDisruptionBudget %s guards %s and lists more than %d status.disruptedPods its controller has not '
                    'confirmed (the API answers 403)' % (budget.key, named, MAX_DISRUPTED_PODS))
        if len(self.pods) > budget.disruptions_allowed:
            why = ''
            if budget.sync_failed:
                why = ' (its controller cannot compute it: condition DisruptionAllowed=False, reason SyncFailed: %s)' % budget.sync_failed
            return ('PodDisruptionBudget %s allows %d disruption(s) now (status.disruptionsAllowed%s), fewer than the %s; '
                    'evicting them one by one would stop after %d'
                    % (budget.key, budget.disruptions_allowed, why, named, budget.disruptions_allowed))
        return None

    def as_dict(self):
        return {'budget': self.budget.key, 'disruptions_allowed': self.budget.disruptions_allowed, 'pods': list(self.pods),
                'unhealthy': list(self.unhealthy), 'refusal': self.refusal()}


@dataclass(frozen=True)
class EvictionBudgets:
    """The pods to evict grouped by their budgets; :meth:`problem` says why none may be evicted, or None."""

    groups: Tuple[BudgetGroup, ...] = ()
    # (pod, (budget, ...)): a pod more than one budget selects, which the Eviction API refuses (HTTP 500).
    overlapping: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    # Pods no budget asks for, in the order they were given.
    free: Tuple[str, ...] = ()

    def refused(self):
        """{pod: why} for every pod that cannot be evicted with the others: the whole group of a budget that cannot
        allow all of it, and each pod under more than one budget."""
        refused = {}
        for group in self.groups:
            reason = group.refusal()
            if reason:
                for pod in group.pods:
                    refused[pod] = reason
        for pod, budgets in self.overlapping:
            refused[pod] = ('%s is selected by PodDisruptionBudgets %s; the Eviction API refuses it (HTTP 500: "%s")'
                            % (pod, ' and '.join(budgets), MORE_THAN_ONE_BUDGET))
        return refused

    def problem(self):
        """Why nobody may be evicted, naming each budget and its pods, or None."""
        reasons = [group.refusal() for group in self.groups if group.refusal()]
        reasons += [self.refused()[pod] for pod, dummy in self.overlapping]
        if not reasons:
            return None
        return 'not every pod to evict can be evicted, so none was: %s' % '; '.join(reasons)

    def order(self):
        """The pods in the order to evict them: first those that take no disruption (no budget asks, or an unhealthy
        pod the budget lets go while its healthy count holds: evicting a healthy pod first would lower that count),
        then the others, grouped by budget. A pod under more than one budget is listed too (its refusal is
        :meth:`refused`'s to say)."""
        unhealthy = [pod for group in self.groups for pod in group.unhealthy]
        taking = [pod for group in self.groups for pod in group.pods]
        return tuple(self.free) + tuple(pod for pod, dummy in self.overlapping) + tuple(unhealthy) + tuple(taking)

    def as_dict(self):
        return {'groups': [group.as_dict() for group in self.groups],
                'overlapping': [{'pod': pod, 'budgets': list(budgets)} for pod, budgets in self.overlapping],
                'free': list(self.free), 'problem': self.problem()}


def group_by_budget(pods, budgets):
    """The :class:`EvictionBudgets` of ``pods`` (:class:`PodToEvict`, in the order to report them) under ``budgets``
    (:class:`Budget`, those of the pods' namespaces)."""
    taking, unhealthy, overlapping, free = {}, {}, [], []
    for pod in pods:
        guards = [budget for budget in budgets if budget.selects(pod)] if pod.asks_budgets() else []
        if not guards:
            free.append(pod.key)
        elif len(guards) > 1:
            overlapping.append((pod.key, tuple(sorted(budget.key for budget in guards))))
        elif not pod.ready and guards[0].lets_unhealthy_go():
            unhealthy.setdefault(guards[0], []).append(pod.key)
        else:
            taking.setdefault(guards[0], []).append(pod.key)
    groups = tuple(BudgetGroup(budget, tuple(taking.get(budget, ())), tuple(unhealthy.get(budget, ())))
                   for budget in sorted(set(taking) | set(unhealthy), key=lambda b: b.key))
    return EvictionBudgets(groups=groups, overlapping=tuple(overlapping), free=tuple(free))


def budgets_of(pod_objects, budget_objects):
    """:func:`group_by_budget` over API objects (Pod v1 and policy/v1 PodDisruptionBudget, as dicts)."""
    return group_by_budget([PodToEvict.from_object(pod) for pod in pod_objects or []],
                           [Budget.from_object(pdb) for pdb in budget_objects or []])

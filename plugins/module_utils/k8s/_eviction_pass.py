# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Evict a set of pods all or none: budgets first, then a dry run of each, then the real pass, which stops at the
first pod it cannot evict and says exactly which pods it evicted.

1. Each pod is read (a pod not found, or another pod of that name, is gone: nothing to evict) and the
   PodDisruptionBudgets of their namespaces are listed.
2. Each eviction is tried as a dry run (admission, budgets, webhooks); one refusal and nobody is evicted.
   Then every budget must allow its whole group at once (_eviction_budgets), else nobody is evicted: a dry run
   uses up no disruption, so it cannot see that two pods under one disruption both pass theirs.
3. The real pass evicts the pods one by one in the budgets' order. A 429 (a budget used up by someone else
   meanwhile) is tried again every :data:`RETRY_DELAY` seconds until the pass's timeout, as ``kubectl drain``
   does (k8s.io/kubectl pkg/drain/drain.go, Helper.evictPods: only IsTooManyRequests is retried, after
   EvictErrorRetryDelay, 5 s in pkg/cmd/drain/drain.go, until the global timeout; 404 counts as done). Any other
   refusal, or a 429 past the timeout, stops the pass. A request without an answer (the connection broke) stops it
   too, after reading the pod back to learn whether that eviction went through.

The Kubernetes client stays out: the caller (gpufleet.mig.mig_pod_eviction) hands in an object with
``read_pod(target)`` (the Pod as a dict, None when not found), ``read_budgets(namespace)`` (policy/v1
PodDisruptionBudgets as dicts) and ``evict(target, dry_run)`` (an :class:`Answer`); the reads raise
:class:`EvictionApiError` when the API does not answer them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass
from typing import Optional, Tuple

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._eviction_budgets import budgets_of

# k8s.io/kubectl pkg/cmd/drain/drain.go: EvictErrorRetryDelay, the wait before a refused (429) eviction is tried again.
RETRY_DELAY = 5
GONE = 404
TOO_MANY_REQUESTS = 429
ACCEPTED = (200, 201)
# What the API answers when a budget refuses (eviction.go): the status a pod refused by the budget check gets.
BUDGET_REFUSAL = 429
MORE_THAN_ONE_BUDGET_STATUS = 500


class EvictionApiError(GpufleetError):
    """The API server did not answer a read the evictions need (the pods, their budgets)."""


@dataclass(frozen=True)
class Target:
    """A pod to evict: its UID, when given, makes the eviction apply to that pod only (a precondition)."""

    namespace: str
    name: str
    uid: Optional[str] = None

    @classmethod
    def from_dict(cls, data):
        return cls(data.get('namespace') or 'default', data['name'], data.get('uid') or None)

    @property
    def key(self):
        return '%s/%s' % (self.namespace, self.name)

    def as_dict(self):
        return {'namespace': self.namespace, 'name': self.name, 'uid': self.uid}


@dataclass(frozen=True)
class Answer:
    """The API server's answer to one eviction: its HTTP status (0: no answer), message and Status causes as
    (reason, message) pairs. ``from_api`` is False for an answer decided here without asking (the budget check
    after the dry runs, a pod gone before)."""

    status: int
    message: str = ''
    causes: Tuple[Tuple[str, str], ...] = ()
    from_api: bool = True

    @property
    def allowed(self):
        """Accepted, or the pod is gone already (404: it holds nothing)."""
        return self.status in ACCEPTED or self.status == GONE

    def as_dict(self):
        return {'allowed': self.allowed, 'status': self.status, 'message': self.message, 'from_api': self.from_api,
                'causes': [{'reason': reason, 'message': message} for reason, message in self.causes]}

    def describe(self):
        """'HTTP 429 Cannot evict ... (The disruption budget web needs 2 healthy pods and has 2 currently)'."""
        if not self.status:
            return 'no answer (%s)' % (self.message or 'the connection failed')
        # metav1.StatusCause's Type is serialised as "reason"; a budget's cause names it (eviction.go).
        budgets = [message for reason, message in self.causes if reason == 'DisruptionBudget' and message]
        why = (self.message or 'refused').rstrip('.')
        if budgets:
            why = '%s (%s)' % (why, '; '.join(budgets))
        return 'HTTP %d %s' % (self.status, why)


GONE_BEFORE = Answer(GONE, 'not evicted: no such pod any more (not found, or another pod of that name)', from_api=False)


@dataclass(frozen=True)
class EvictionRun:
    """What one all-or-none eviction did. ``stage``: where it ended ('dry_run': a dry run refused, or a dry run was
    all that was asked; 'budgets': the dry runs passed but a budget cannot allow its whole group; 'evict': after the
    real pass). ``answers`` are the last answer per target (a dry run's, the budget check's, or the real
    eviction's), in the order of ``targets``."""

    targets: Tuple[Target, ...]
    dry_run: bool
    stage: str
    answers: Tuple[Answer, ...]
    budgets: object = None
    evicted: Tuple[Target, ...] = ()
    # The pod the real pass stopped at; when its eviction got no answer, what reading it back said, and whether
    # that left it in doubt (it could not be read either).
    stopped_at: Optional[Target] = None
    read_back: Optional[str] = None
    in_doubt: Tuple[Target, ...] = ()
    retried_for: float = 0

    def refusals(self):
        """(target, answer) of every refused pod: those the budgets or the dry run refuse, or where the pass stopped."""
        if self.stopped_at is not None:
            return tuple((target, answer) for target, answer in zip(self.targets, self.answers) if target == self.stopped_at)
        return tuple((target, answer) for target, answer in zip(self.targets, self.answers) if not answer.allowed)

    def not_evicted(self):
        """The pods that were to be evicted and were not (gone ones excluded), in the order given."""
        done = set(self.evicted) | set(self.in_doubt)
        return tuple(t for t, a in zip(self.targets, self.answers) if t not in done and a is not GONE_BEFORE)

    def problem(self):
        """Why not every pod was evicted (or, for a dry run, would not be), naming the pods, or None."""
        if self.stage == 'budgets':
            return '%s; each passed its dry run, but a dry run uses up no disruption' % self.budgets.problem()
        refused = self.refusals()
        if self.stage == 'dry_run':
            if not refused:
                return None
            return ('the API server refused the eviction (tried as a dry run first) of %s: %s; nobody was evicted'
                    % ('a pod' if len(refused) == 1 else '%d pods' % len(refused),
                       '; '.join('%s: %s' % (target.key, answer.describe()) for target, answer in refused)))
        if self.stopped_at is None:
            return None
        answer = dict(refused)[self.stopped_at]
        if answer.status:
            head = 'the API server refused the eviction of %s: %s' % (self.stopped_at.key, answer.describe())
            if answer.status == TOO_MANY_REQUESTS:
                head += ' (tried every %d s for %d s)' % (RETRY_DELAY, self.retried_for)
        else:
            head = 'the API server did not answer the eviction of %s: %s; read back, %s' % (
                self.stopped_at.key, answer.message or 'the connection failed', self.read_back)
        doubt = '; evicted or not, unknown: %s' % ', '.join(t.key for t in self.in_doubt) if self.in_doubt else ''
        return '%s; the evictions stopped there: evicted %s; not evicted %s%s' % (
            head, ', '.join(t.key for t in self.evicted) or 'none', ', '.join(t.key for t in self.not_evicted()) or 'none', doubt)

    def as_dict(self):
        results = []
        for target, answer in zip(self.targets, self.answers):
            result = answer.as_dict()
            result.update(pod=target.key, target=target.as_dict(), evicted=target in self.evicted)
            results.append(result)
        return {
            'results': results,
            'dry_run': self.dry_run,
            'stage': self.stage,
            'budgets': self.budgets.as_dict() if self.budgets is not None else None,
            'evicted': [target.as_dict() for target in self.evicted],
            'not_evicted': [target.as_dict() for target in self.not_evicted()] if not self.dry_run else [],
            'in_doubt': [target.as_dict() for target in self.in_doubt],
            'refused': [dict(answer.as_dict(), pod=target.key, target=target.as_dict()) for target, answer in self.refusals()],
            'problem': self.problem(),
        }


def _is_gone(target, pod):
    """Whether the pod read back for ``target`` is not there any more, or is being deleted (evicted)."""
    if pod is None:
        return True
    metadata = pod.get('metadata') or {}
    return bool((target.uid and metadata.get('uid') != target.uid) or metadata.get('deletionTimestamp'))


def evict_all_or_none(client, targets, dry_run, timeout, clock, sleep, delay=RETRY_DELAY):
    """Evict ``targets`` (:class:`Target`) all or none, as the module docstring says; an :class:`EvictionRun`.

    ``timeout`` bounds the real pass (its 429 retries and reading a pod back); ``clock`` and ``sleep`` are
    time.monotonic and time.sleep outside the tests. Raises :class:`EvictionApiError` when a read before the
    first eviction gets no answer: nobody was evicted then.
    """
    targets = tuple(targets)
    answers = {}
    live = []
    for target in targets:
        pod = client.read_pod(target)
        if pod is None or (target.uid and (pod.get('metadata') or {}).get('uid') != target.uid):
            answers[target] = GONE_BEFORE
        else:
            live.append((target, pod))
    namespaces = sorted(set(target.namespace for target, dummy in live))
    budget_objects = [pdb for namespace in namespaces for pdb in client.read_budgets(namespace)]
    budgets = budgets_of([pod for dummy, pod in live], budget_objects)
    by_key = dict((target.key, target) for target, dummy in live)

    def run(stage, evicted=(), stopped_at=None, read_back=None, in_doubt=(), retried_for=0):
        return EvictionRun(targets, dry_run, stage, tuple(answers[t] for t in targets), budgets,
                           tuple(evicted), stopped_at, read_back, tuple(in_doubt), retried_for)

    order = [by_key[key] for key in budgets.order()]
    for target in order:
        answers[target] = client.evict(target, True)
    if any(not answers[target].allowed for target in order):
        return run('dry_run')
    refused = budgets.refused()
    if refused:
        overlapping = dict(budgets.overlapping)
        for target in order:
            if target.key in refused:
                status = MORE_THAN_ONE_BUDGET_STATUS if target.key in overlapping else BUDGET_REFUSAL
                answers[target] = Answer(status, refused[target.key], from_api=False)
        return run('budgets')
    if dry_run:
        return run('dry_run')

    evicted = []
    deadline = clock() + timeout
    for target in order:
        first_try = clock()
        while True:
            answer = client.evict(target, False)
            answers[target] = answer
            if answer.allowed:
                evicted.append(target)
                break
            if answer.status == TOO_MANY_REQUESTS and clock() + delay <= deadline:
                sleep(delay)
                continue
            if answer.status:
                return run('evict', evicted, target, retried_for=clock() - first_try)
            gone, read_back = _read_back(client, target, deadline, clock, sleep, delay)
            if gone:
                evicted.append(target)
            return run('evict', evicted, target, read_back, in_doubt=() if gone is not None else (target,))
    return run('evict', evicted)


def _read_back(client, target, deadline, clock, sleep, delay):
    """(gone, what was read) for the pod whose eviction got no answer: gone is True when it is gone or being deleted,
    False when it still runs, None when it could not be read until the deadline."""
    while True:
        try:
            pod = client.read_pod(target)
        except EvictionApiError as exc:
            if clock() + delay <= deadline:
                sleep(delay)
                continue
            return None, 'it could not be read either (%s)' % exc
        if _is_gone(target, pod):
            return True, 'it is evicted (gone, or being deleted)'
        return False, 'it still runs: not evicted'

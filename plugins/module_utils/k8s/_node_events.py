# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The Kubernetes Events gpufleet.mig writes (events.k8s.io/v1): a node's MIG change and a pod's unmet demand.

Pure Python (no Ansible, no Kubernetes client): the role and playbooks/mig_demand.yml write what these
functions return with kubernetes.core.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gpu_pods import pod_key

EVENT_CONTROLLER = 'gpufleet.mig/mig-layout'
# events.k8s.io/v1 limits a note to 1 kB (k8s.io/kubernetes pkg/apis/events/validation: NoteLengthLimit).
EVENT_NOTE_LIMIT = 1024


def truncate(text, limit):
    text = '' if text is None else str(text)
    return text if len(text) <= limit else text[:limit - 3] + '...'


def event(regarding, reason, note, stamp, sequence=0, warning=False, action='MIGLayoutChange', instance='gpufleet.mig'):
    """An events.k8s.io/v1 Event about ``regarding`` (a Node or Pod object), so kubectl describe tells the story.

    ``stamp`` is the run's time as '%Y-%m-%dT%H:%M:%S.%fZ' (eventTime is a MicroTime); the name is
    unique per object, run and ``sequence``. A cluster-scoped object's events live in ``default``
    (as the kubelet's node events do). Validation: k8s.io/kubernetes pkg/apis/events/validation.
    """
    metadata = regarding.get('metadata') or {}
    kind = regarding.get('kind') or 'Pod'
    namespace = metadata.get('namespace') or ''
    digits = ''.join(c for c in stamp if c.isdigit())
    ref = {'apiVersion': regarding.get('apiVersion') or 'v1', 'kind': kind, 'name': metadata.get('name')}
    if namespace:
        ref['namespace'] = namespace
    if metadata.get('uid'):
        ref['uid'] = metadata['uid']
    return {
        'apiVersion': 'events.k8s.io/v1',
        'kind': 'Event',
        'metadata': {'name': '%s.mig.%s.%d' % (metadata.get('name'), digits, sequence), 'namespace': namespace or 'default'},
        'eventTime': stamp,
        'reportingController': EVENT_CONTROLLER,
        'reportingInstance': truncate(instance, 128),
        'action': action,
        'reason': reason,
        'regarding': ref,
        'note': truncate(note, EVENT_NOTE_LIMIT),
        'type': 'Warning' if warning else 'Normal',
    }


DEMAND_CONTROLLER = 'gpufleet.mig/mig-demand'
DEMAND_REASON = 'MIGDemandUnmet'
# Set on every unmet-demand Event, so that one list (a label selector) finds those of earlier runs.
DEMAND_LABEL = 'gpufleet.mig/unmet-demand'


def _demand_event_name(pod, note):
    """``<pod>.migdemand.<hash of the pod's uid and the note>``, at most 253 characters (a DNS subdomain)."""
    metadata = pod.get('metadata') or {}
    digest = hashlib.sha256(('%s\n%s' % (metadata.get('uid') or pod_key(pod), note)).encode('utf-8')).hexdigest()[:16]
    suffix = '.migdemand.' + digest
    return (metadata.get('name') or 'pod')[:253 - len(suffix)].rstrip('.-') + suffix


def unmet_demand_events(unmet_reasons, pods, existing, stamp):
    """The Events that tell each waiting pod why the demand plan cannot give it its MIG devices (kubectl describe pod).

    ``unmet_reasons`` is the plan's {namespace/name: [one line per profile]} (gpufleet.mig.mig_demand_plan);
    ``pods`` the Pod objects as listed (a pod not listed, bound or gone meanwhile, is told nothing; its uid makes
    kubectl describe pod find the Event); ``existing`` the unmet-demand Events found (DEMAND_LABEL); ``stamp`` the
    run's time ('%Y-%m-%dT%H:%M:%S.%fZ').

    No new Event on every run for the same reason: the Event's name is derived from the pod's uid and the note, so
    the next run that finds the same reason finds its Event and counts it again in its ``series`` (count,
    lastObservedTime), as Kubernetes' own event recorder does with an isomorphic event (k8s.io/client-go
    tools/events: an EventSeries instead of a new object; events.k8s.io/v1 validation wants series.count >= 2).
    A changed reason is a new Event. Returns {'create': [Event objects], 'count': [{namespace, name, series}]}.
    """
    found = {}
    for before in existing or []:
        metadata = before.get('metadata') or {}
        found[(metadata.get('namespace'), metadata.get('name'))] = before
    listed = dict((pod_key(pod), pod) for pod in pods or [])
    create, count = [], []
    for key in sorted(unmet_reasons or {}):
        pod = listed.get(key)
        lines = unmet_reasons[key] or []
        if pod is None or not lines:
            continue
        note = 'gpufleet.mig cannot give this pod its MIG devices: %s' % '; '.join(lines)
        wanted = event(pod, DEMAND_REASON, note, stamp, warning=True, action='PlanMIGDemand')
        wanted['reportingController'] = DEMAND_CONTROLLER
        wanted['metadata']['name'] = _demand_event_name(pod, wanted['note'])
        wanted['metadata']['labels'] = {DEMAND_LABEL: 'true'}
        before = found.get((wanted['metadata']['namespace'], wanted['metadata']['name']))
        if before is None:
            create.append(wanted)
            continue
        seen = ((before.get('series') or {}).get('count')) or 1
        count.append({'namespace': wanted['metadata']['namespace'], 'name': wanted['metadata']['name'],
                      'series': {'count': int(seen) + 1, 'lastObservedTime': stamp}})
    return {'create': create, 'count': count}

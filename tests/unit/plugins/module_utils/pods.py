# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pods as the API server returns them (Pod v1), for the event source's unit tests and the fake API server."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The NodeResourcesFit plugin's message when no node has enough of a resource (kubernetes
# pkg/scheduler/framework/plugins/noderesources/fit.go, "Insufficient <resource>"), as the
# scheduler writes it on the PodScheduled condition.
INSUFFICIENT = '0/3 nodes are available: 3 Insufficient {resource}. preemption: 0/3 nodes are available: ' \
               '3 No preemption victims found for incoming pod.'


def pod(name, resources=None, namespace='team-a', phase='Pending', scheduled=None, message=None,
        priority=None, priority_class=None, init_containers=None, node_name=None, limits_only=False,
        resource_version='1'):
    """A pod whose single container requests ``resources`` ({name: quantity}). ``scheduled``: the
    PodScheduled condition as (status, reason); default: False/Unschedulable with the message naming
    the first requested resource as insufficient."""
    resources = {'nvidia.com/mig-1g.10gb': '1'} if resources is None else resources
    spec = {'containers': [{'name': 'main', 'image': 'cuda',
                            'resources': {'limits': dict(resources)} if limits_only
                            else {'requests': dict(resources), 'limits': dict(resources)}}]}
    if init_containers:
        spec['initContainers'] = init_containers
    if priority is not None:
        spec['priority'] = priority
    if priority_class is not None:
        spec['priorityClassName'] = priority_class
    if node_name:
        spec['nodeName'] = node_name
    status = {'phase': phase}
    scheduled = ('False', 'Unschedulable') if scheduled is None else scheduled
    if scheduled:
        first = sorted(resources, key=lambda name: (not name.startswith('nvidia.com/'), name))[0] if resources else 'cpu'
        status['conditions'] = [{'type': 'PodScheduled', 'status': scheduled[0], 'reason': scheduled[1],
                                 'message': INSUFFICIENT.format(resource=first) if message is None else message}]
    return {'apiVersion': 'v1', 'kind': 'Pod',
            'metadata': {'name': name, 'namespace': namespace, 'uid': 'uid-' + name,
                         'resourceVersion': resource_version, 'creationTimestamp': '2026-12-03T22:00:00Z'},
            'spec': spec, 'status': status}


def running(name, phase='Running', **kwargs):
    """A pod bound to node gpu-1 and scheduled (a holder of its MIG devices while Running)."""
    return pod(name, phase=phase, node_name='gpu-1', scheduled=('True', ''), **kwargs)

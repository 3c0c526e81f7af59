# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter of playbooks/mig_demand.yml: the pods that wait for MIG slices, out of a list of Pod objects, as the
demand planner takes them. Thin: the rule is module_utils/k8s/_pending_pods, the one the event source
gpufleet.mig.mig_pending_pods uses.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import pending_mig_requests, still_waiting


def mig_pending_requests(pods, told=None):
    """The MIG requests of the ``pods`` the scheduler could not place for lack of a MIG resource; with ``told`` (an
    event's requests), only those of them whose pod still waits."""
    if not isinstance(pods, list) or not all(isinstance(pod, dict) for pod in pods):
        raise AnsibleFilterError('mig_pending_requests takes a list of Pod objects (the resources of kubernetes.core.k8s_info)')
    if told is None:
        return pending_mig_requests(pods)
    if not isinstance(told, list) or not all(isinstance(request, dict) for request in told):
        raise AnsibleFilterError('mig_pending_requests: told must be a list of requests (the event source\'s mig_pending_pods.requests)')
    return still_waiting(told, pods)


class FilterModule(object):
    """gpufleet.mig pending pod filters."""

    def filters(self):
        return {'mig_pending_requests': mig_pending_requests}

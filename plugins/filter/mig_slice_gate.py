# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter of the gpu_tenancy role: the slice gate's MutatingAdmissionPolicy and binding, in the API version the
cluster serves. Thin: the rule is module_utils/k8s/_slice_gate, whose gate name the event source reads too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._slice_gate import (
    SliceGateError, gated_resources, served_api_version, slice_gate_objects)


def mig_slice_gate(found, time_slicing=None, extra_resources=None, namespaces=None, namespace_selector=None, labels=None):
    """{api_version, resources, objects}: the policy and binding for the API version ``found`` says the cluster serves."""
    if not isinstance(found, dict):
        raise AnsibleFilterError('mig_slice_gate takes a mapping of API version to whether the cluster serves '
                                 'MutatingAdmissionPolicy in it (kubernetes.core.k8s_info api_found)')
    for name, value in (('time_slicing', time_slicing), ('extra_resources', extra_resources), ('namespaces', namespaces)):
        if value is not None and not isinstance(value, list):
            raise AnsibleFilterError('mig_slice_gate: %s must be a list, got %r' % (name, value))
    if namespace_selector is not None and not isinstance(namespace_selector, dict):
        raise AnsibleFilterError('mig_slice_gate: namespace_selector must be a mapping (a LabelSelector), got %r' % (namespace_selector,))
    try:
        api_version = served_api_version(found)
        resources = gated_resources(time_slicing, extra_resources)
        objects = slice_gate_objects(api_version, resources, namespaces, namespace_selector, labels)
    except SliceGateError as exc:
        raise AnsibleFilterError(str(exc))
    return {'api_version': api_version, 'resources': resources, 'objects': objects}


class FilterModule(object):
    """gpufleet.mig slice gate filter."""

    def filters(self):
        return {'mig_slice_gate': mig_slice_gate}

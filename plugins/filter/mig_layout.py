# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of the mig_layout role: validate mig-parted configs and resolve a layout per host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.module_utils._layout_catalog import (
    LayoutConfigError,
    gpu_pods,
    module_groups,
    resolve,
    select,
    validate_configs,
    validate_document,
)


def mig_layout_validate(configs, name=None, document=False):
    """Validated ``mig-configs`` (or a whole v1 file when ``document``); fails on the first problem."""
    try:
        validated = validate_document(configs) if document else validate_configs(configs)
        if name is not None:
            select(validated, name)
    except LayoutConfigError as exc:
        raise AnsibleFilterError('invalid MIG layout configuration: %s' % exc)
    return validated


def mig_layout_resolve(configs, name, gpus):
    """Per GPU of one host (nvidia_mig_facts GPUs): wanted mode, instances, in_layout; plus module groups."""
    try:
        resolved = resolve(validate_configs(configs), name, gpus)
    except LayoutConfigError as exc:
        raise AnsibleFilterError('MIG layout cannot be used on this host: %s' % exc)
    resolved['groups'] = module_groups(resolved)
    return resolved


def mig_layout_gpu_pods(pods):
    """The pods that hold GPUs or MIG devices (namespace and name), DaemonSet pods left out."""
    return gpu_pods(pods)


class FilterModule(object):
    """gpufleet.mig layout filters."""

    def filters(self):
        return {
            'mig_layout_validate': mig_layout_validate,
            'mig_layout_resolve': mig_layout_resolve,
            'mig_layout_gpu_pods': mig_layout_gpu_pods,
        }

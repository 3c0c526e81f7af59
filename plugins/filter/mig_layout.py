# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of the mig_layout role: validate mig-parted configs, report problems, list the pods that hold GPUs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.module_utils._layout_catalog import (
    LayoutConfigError,
    check_layout,
    gpu_pods,
    layout_problems,
    validate_configs,
    validate_document,
)


def _load(configs, document):
    return validate_document(configs) if document else validate_configs(configs)


def mig_layout_validate(configs, name=None, document=False):
    """Validated ``mig-configs`` (or a whole v1 file when ``document``); layout ``name`` is checked strictly."""
    try:
        validated = _load(configs, document)
        if name is not None:
            check_layout(validated, name)
    except LayoutConfigError as exc:
        raise AnsibleFilterError('invalid MIG layout configuration: %s' % exc)
    return validated


def mig_layout_problems(configs, skip=None, document=False):
    """{layout: [problems]} of the layouts other than ``skip``: what would refuse them if they were applied."""
    try:
        return layout_problems(_load(configs, document), skip)
    except LayoutConfigError as exc:
        raise AnsibleFilterError('invalid MIG layout configuration: %s' % exc)


def mig_layout_gpu_pods(pods, names=None):
    """The pods that hold GPUs or MIG devices (namespace and name), DaemonSet pods left out; only ``names`` if given."""
    return gpu_pods(pods, names)


class FilterModule(object):
    """gpufleet.mig layout filters."""

    def filters(self):
        return {
            'mig_layout_validate': mig_layout_validate,
            'mig_layout_problems': mig_layout_problems,
            'mig_layout_gpu_pods': mig_layout_gpu_pods,
        }

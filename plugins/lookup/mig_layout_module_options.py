# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: mig_layout_module_options
version_added: 0.3.0
short_description: The options of nvidia_mig_layout that the mig_layout role's variables set
description:
  - The one place a setting of the P(gpufleet.mig.mig_layout#role) role becomes an option of
    M(gpufleet.mig.nvidia_mig_layout) (C(mig_layout_unmatched) gives C(unmatched), C(mig_layout_systemd) gives C(systemd),
    C(mig_layout_environment) gives C(boot_environment), and so on). The role, the rollout's pre-flight, the report's
    planned view (playbooks/mig_report.yml) and the demand run's fast create (playbooks/mig_demand_create.yml) all pass
    what it returns as the module's C(module_defaults), so that a dry run, the planned map and the real run decide with
    the same options.
  - Reads the variables as the task sees them (inventory, play, role defaults, extra vars). A variable that is not set,
    or set to null, is left out, so the module's default applies, which is the role's default (a unit test pins each pair).
  - The role variables renamed in 0.3.0 (C(mig_layout_allow_gpu_reset), C(mig_layout_manage_systemd),
    C(mig_layout_other_owner_services)) still work until 1.0.0, with a deprecation warning.
  - Options that depend on the call (C(name), C(config), C(apply), C(evict), C(pod_resources), C(defer_pending),
    C(create_only)) are the caller's.
options: {}
author:
  - gpufleet.mig developers (@gpufleet)
'''

EXAMPLES = r'''
- name: Plan a layout with the options the mig_layout role would use
  gpufleet.mig.nvidia_mig_layout:
    name: nighttime
    config: "{{ my_layouts }}"
    apply: false
  module_defaults:
    gpufleet.mig.nvidia_mig_layout: "{{ lookup('gpufleet.mig.mig_layout_module_options') }}"
'''

RETURN = r'''
_raw:
  description: One dictionary, option name to value, of every option a role variable sets.
  type: list
  elements: dict
'''

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.mig.plugins.filter.mig_layout import RENAMED_VARIABLES, renamed_variable_warning

# (module option, role variable): each variable is named after the option it feeds, but boot_environment (the
# environment of every module call and of the boot unit alike) and pod_resources_socket (the kubelet's, like the other
# Kubernetes settings it is read with).
MODULE_OPTIONS = (
    ('unmatched', 'mig_layout_unmatched'),
    ('allow_reset', 'mig_layout_allow_reset'),
    ('gpu_clients', 'mig_layout_gpu_clients'),
    ('other_owner_units', 'mig_layout_other_owner_units'),
    ('allow_other_owner', 'mig_layout_allow_other_owner'),
    ('systemd', 'mig_layout_systemd'),
    ('boot_persistence', 'mig_layout_boot_persistence'),
    ('config_dir', 'mig_layout_config_dir'),
    ('lib_dir', 'mig_layout_lib_dir'),
    ('bin_dir', 'mig_layout_bin_dir'),
    ('systemd_dir', 'mig_layout_systemd_dir'),
    ('python', 'mig_layout_python'),
    ('boot_environment', 'mig_layout_environment'),
    ('metrics_dir', 'mig_layout_metrics_dir'),
    ('lock_timeout', 'mig_layout_lock_timeout'),
    ('pod_resources_socket', 'mig_layout_pod_resources_socket'),
)


def module_options(values, warn=None):
    """{option: value} from ``values`` ({role variable: value} of the variables set); a renamed variable that is set
    wins over its new name (it was set on purpose), with ``warn(message)``."""
    renamed = dict((new, old) for old, new in RENAMED_VARIABLES.items())
    options = {}
    for option, name in MODULE_OPTIONS:
        value = values.get(name)
        old = renamed.get(name)
        if old is not None and values.get(old) is not None:
            if warn:
                warn(renamed_variable_warning(old))
            value = values[old]
        if value is not None:
            options[option] = value
    return options


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError('mig_layout_module_options takes no terms: it reads the role variables, got %r' % (terms,))
        variables = variables or {}
        names = [name for dummy, name in MODULE_OPTIONS] + sorted(RENAMED_VARIABLES)
        values = dict((name, self._templar.template(variables[name])) for name in names if name in variables)

        def warn(message):
            # The renamed variables go in 1.0.0 (roles/mig_layout/meta/argument_specs.yml says so too).
            Display().deprecated(message, version='1.0.0', collection_name='gpufleet.mig')
        return [module_options(values, warn)]

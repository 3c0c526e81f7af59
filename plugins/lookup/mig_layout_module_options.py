# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: mig_layout_module_options
version_added: 0.3.0
short_description: The options of a gpufleet.mig module that the mig_layout role's variables set
description:
  - The one place a setting of the P(gpufleet.mig.mig_layout#role) role becomes an option of
    M(gpufleet.mig.nvidia_mig_layout), M(gpufleet.mig.nvidia_mig_repack) or M(gpufleet.mig.nvidia_mig_facts). Each variable
    is named after the option it feeds (C(mig_layout_unmatched) gives C(unmatched), C(mig_layout_boot_environment) gives
    C(boot_environment), C(mig_layout_repack_fragmentation_above) gives the repack's C(fragmentation_above)); the kubelet's
    settings carry the C(mig_layout_k8s) prefix of the other Kubernetes settings (C(mig_layout_k8s_pod_resources) gives
    C(pod_resources), C(mig_layout_k8s_pod_resources_socket) gives C(pod_resources_socket)).
  - The role, the rollout's pre-flight, the report's planned view (playbooks/mig_report.yml), the demand runs
    (playbooks/mig_demand.yml, playbooks/mig_demand_create.yml) and the scheduled repack all pass what it returns as the
    module's C(module_defaults), so that a dry run, the planned map and the real run decide with the same options.
  - Reads the variables as the task sees them (inventory, play, role defaults, extra vars). A variable that is not set,
    or set to null, is left out, so the module's default applies, which is the role's default (a unit test pins each pair).
  - A renamed variable's old name still works until the release named in its deprecation warning (C(1.0.0) for
    C(mig_layout_allow_gpu_reset), C(mig_layout_manage_systemd), C(mig_layout_other_owner_services); C(0.4.0) for
    C(mig_layout_environment), C(mig_layout_pod_resources_socket)). Set to a value other than the new name's (the new name
    left at its default counts as not set), it is a one-line error.
  - Options that depend on the call (C(name), C(config), C(apply), C(evict), C(defer_pending), C(create_only)) are the
    caller's; the role decides C(pod_resources) for a Kubernetes node from its switch mode, starting from this one.
options:
  module:
    description: The module whose options are returned.
    type: str
    choices: [nvidia_mig_layout, nvidia_mig_repack, nvidia_mig_facts]
    default: nvidia_mig_layout
  problem:
    description:
      - Return, instead of the options, the one line that makes the role's settings unusable for any of the modules (an
        old name and its new name set to different values), or an empty string. The rollout's pre-flight reads it on every
        host, so such a setting stops the run before any host is touched, told once for the hosts it concerns.
    type: bool
    default: false
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
  environment: "{{ lookup('gpufleet.mig.mig_layout_module_options').boot_environment | default({}) }}"

- name: Plan a repack with the role's thresholds
  gpufleet.mig.nvidia_mig_repack:
  check_mode: true
  module_defaults:
    gpufleet.mig.nvidia_mig_repack: "{{ lookup('gpufleet.mig.mig_layout_module_options', module='nvidia_mig_repack') }}"
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

# The kubelet's settings, read by every module that reads which pod holds which GPU.
KUBELET_OPTIONS = (
    ('pod_resources', 'mig_layout_k8s_pod_resources'),
    ('pod_resources_socket', 'mig_layout_k8s_pod_resources_socket'),
)

# (module option, role variable) per module.
MODULE_OPTIONS = {
    'nvidia_mig_layout': (
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
        # The boot unit's and the metrics timer's environment, and (tasks of the role and playbooks, `environment:`)
        # every module call's: the boot-time apply must reach the NVML library the calls reached.
        ('boot_environment', 'mig_layout_boot_environment'),
        ('metrics_dir', 'mig_layout_metrics_dir'),
        ('lock_timeout', 'mig_layout_lock_timeout'),
    ) + KUBELET_OPTIONS,
    'nvidia_mig_repack': (
        ('fragmentation_above', 'mig_layout_repack_fragmentation_above'),
        ('stranded_above', 'mig_layout_repack_stranded_above'),
        ('lock_timeout', 'mig_layout_lock_timeout'),
    ) + KUBELET_OPTIONS,
    'nvidia_mig_facts': KUBELET_OPTIONS,
}

# Deprecated role variable names: old name -> (new name, the new name's role default, the release without the old
# name). The default tells a new name left as the role set it from one the user set (a unit test pins it to
# roles/mig_layout/defaults/main.yml).
RENAMED_VARIABLES = {
    'mig_layout_allow_gpu_reset': ('mig_layout_allow_reset', True, '1.0.0'),
    'mig_layout_manage_systemd': ('mig_layout_systemd', None, '1.0.0'),
    'mig_layout_other_owner_services': ('mig_layout_other_owner_units', ['nvidia-mig-manager.service'], '1.0.0'),
    'mig_layout_environment': ('mig_layout_boot_environment', {}, '0.4.0'),
    'mig_layout_pod_resources_socket': ('mig_layout_k8s_pod_resources_socket', '/var/lib/kubelet/pod-resources/kubelet.sock', '0.4.0'),
}


# Ansible's deprecation line for each release of RENAMED_VARIABLES (ansible-test's pylint wants the version written out).
DEPRECATION_LINES = {
    '1.0.0': lambda message: Display().deprecated(message, version='1.0.0', collection_name='gpufleet.mig'),
    '0.4.0': lambda message: Display().deprecated(message, version='0.4.0', collection_name='gpufleet.mig'),
}


class RenamedVariableConflict(ValueError):
    """An old name and its new name both set, to different values."""


def renamed_variable_warning(old_name):
    """The one-line deprecation message of a renamed variable that is still set."""
    # Ansible's deprecation line adds the release that removes it (RENAMED_VARIABLES).
    return ('the mig_layout role variable %s is deprecated: set %s instead (the name of the module option it feeds); '
            'its value is used' % (old_name, RENAMED_VARIABLES[old_name][0]))


def resolve_renamed(values, warn=None):
    """``values`` ({role variable: value}) with each deprecated old name that is set moved to its new name, with
    ``warn(message, removed_in)``; RenamedVariableConflict where the new name is set too, to a different value."""
    resolved = dict(values)
    for old_name in sorted(RENAMED_VARIABLES):
        new_name, default, removed_in = RENAMED_VARIABLES[old_name]
        old = resolved.pop(old_name, None)
        if old is None:
            continue
        new = resolved.get(new_name)
        if new is not None and new != default and new != old:
            raise RenamedVariableConflict(
                'mig_layout role: %s (deprecated) is %r and %s is %r; set only %s' % (old_name, old, new_name, new, new_name))
        if warn:
            warn(renamed_variable_warning(old_name), removed_in)
        resolved[new_name] = old
    return resolved


def variable_names(module='nvidia_mig_layout'):
    """The role variables the options of ``module`` come from, old names included."""
    names = [name for dummy, name in MODULE_OPTIONS[module]]
    return names + sorted(old for old, (new, dummy, dummy) in RENAMED_VARIABLES.items() if new in names)


def module_options(values, warn=None, module='nvidia_mig_layout'):
    """{option: value} of ``module`` from ``values`` ({role variable: value} of the variables set, old names included)."""
    resolved = resolve_renamed(values, warn)
    options = {}
    for option, name in MODULE_OPTIONS[module]:
        if resolved.get(name) is not None:
            options[option] = resolved[name]
    return options


def settings_problem(values):
    """The one line that makes ``values`` ({role variable: value}) unusable for any module, or ''."""
    try:
        resolve_renamed(values)
    except RenamedVariableConflict as exc:
        return str(exc)
    return ''


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError('mig_layout_module_options takes no terms: it reads the role variables, got %r' % (terms,))
        module = kwargs.pop('module', 'nvidia_mig_layout')
        problem = kwargs.pop('problem', False)
        if kwargs:
            raise AnsibleLookupError('mig_layout_module_options takes only the options module and problem, got %s'
                                     % ', '.join(sorted(kwargs)))
        if module not in MODULE_OPTIONS:
            raise AnsibleLookupError('mig_layout_module_options: module must be one of %s, not %r' % (', '.join(MODULE_OPTIONS), module))
        variables = variables or {}
        # A problem is any module's: every variable the lookup reads.
        names = set(name for each in MODULE_OPTIONS for name in variable_names(each)) if problem else variable_names(module)
        values = dict((name, self._templar.template(variables[name])) for name in names if name in variables)
        if problem:
            return [settings_problem(values)]

        def warn(message, removed_in):
            DEPRECATION_LINES[removed_in](message)
        try:
            return [module_options(values, warn, module)]
        except RenamedVariableConflict as exc:
            raise AnsibleLookupError(str(exc))

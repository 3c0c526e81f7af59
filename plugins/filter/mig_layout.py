# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of the mig_layout role and playbooks/mig_layout.yml: validate mig-parted configs and the rollout
settings, report problems, list the pods that hold GPUs, the rollout's progress and its fleet plan.

Thin: the rules are in module_utils (_layout_catalog, _rollout_plan), where unit tests reach them. The
pre-flight filters return their problem as text instead of raising: the playbook fails once with that one
line (a raising filter is reported by ansible-core as a chain of "caused by" per host).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible.module_utils.six import string_types

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gpu_pods import gpu_pods
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import (
    MEMORY_SLICES_KEY,
    LayoutConfigError,
    check_layout,
    layout_problems,
    validate_configs,
    validate_document,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import known_gpus, may_match_any
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._rollout_plan import (
    RolloutSettingsError,
    fleet_plan,
    instances_text,
    play_serial,
    progress,
    rollout_settings,
    unfinished,
)

try:
    import yaml
except ImportError:  # pragma: no cover - ansible-core requires PyYAML on the controller
    yaml = None


def _parse_text(text, source):
    """YAML text -> data; a syntax error names the file (``source``) and the line."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, 'problem_mark', None)
        where = '%s line %d, column %d' % (source or 'the mig-parted config', mark.line + 1, mark.column + 1) if mark \
            else (source or 'the mig-parted config')
        raise LayoutConfigError('%s: not valid YAML: %s' % (where, getattr(exc, 'problem', None) or exc))


def _load(configs, document, source=None):
    if isinstance(configs, string_types):
        configs = _parse_text(configs, source)
        document = True
    try:
        return validate_document(configs) if document else validate_configs(configs)
    except LayoutConfigError as exc:
        if source:
            raise LayoutConfigError('%s: %s' % (source, exc))
        raise


def _checked(configs, name, document, source):
    validated = _load(configs, document, source)
    if name is not None:
        check_layout(validated, name)
    return validated


def mig_layout_validate(configs, name=None, document=False, source=None):
    """Validated ``mig-configs`` (or a whole v1 file when ``document``, or its YAML text); ``name`` checked strictly."""
    try:
        return _checked(configs, name, document, source)
    except LayoutConfigError as exc:
        raise AnsibleFilterError(str(exc))


def mig_layout_catalog(configs, name=None, document=False, source=None, gpus=None):
    """As mig_layout_validate, without raising: {'configs': the validated configs or None, 'error': one line or None,
    'matches': whether layout ``name`` may match one of the host's known ``gpus`` (None when they are unknown)}."""
    try:
        validated = _checked(configs, name, document, source)
    except LayoutConfigError as exc:
        return {'name': name, 'configs': None, 'error': str(exc), 'matches': None}
    matches = None
    if name is not None and gpus is not None:
        matches = may_match_any(validated[name], gpus)
    return {'name': name, 'configs': validated, 'error': None, 'matches': matches}


def mig_layout_host_gpus(decision):
    """The MIG-capable GPUs a host's decision reported (kept as a cached fact for the next pre-flight)."""
    return known_gpus(decision)


def mig_layout_preflight(checks, hosts):
    """The one line that stops the run before any host is touched, or '' when every check passed.

    ``checks``: each host's result of mig_layout_catalog (or any {'error'}), in the order of ``hosts``. The same
    problem is reported once, with the hosts it concerns ("every host" when all of them).
    """
    by_error = {}
    order = []
    for host, check in zip(hosts, checks):
        error = (check or {}).get('error')
        if error:
            if error not in by_error:
                order.append(error)
            by_error.setdefault(error, []).append(host)
    parts = []
    for error in order:
        concerned = by_error[error]
        who = 'every host of the play' if len(concerned) == len(hosts) and len(hosts) > 1 else ', '.join(concerned)
        parts.append('%s [%s]' % (error, who))
    # A layout that matches no GPU anywhere would be declared on every host and apply nowhere; only when every
    # host's GPUs are known (its last decision, a cached fact) is that sure.
    checks = [check or {} for check in checks]
    if not parts and hosts and all(check.get('matches') is False for check in checks):
        names = sorted(set(str(check.get('name')) for check in checks if check.get('name')))
        parts.append('layout %s matches no GPU of any host of the play (their GPUs as their last run reported them): '
                     'it would be declared everywhere and applied nowhere; check its device-filter, devices and %s'
                     % (', '.join(names) or '', MEMORY_SLICES_KEY))
    return ('Nothing was changed: ' + ' | '.join(parts)) if parts else ''


def mig_layout_rollout_settings(serial=1, max_fail_percentage=0):
    """{'serial', 'max_fail_percentage', 'error'}: the rollout settings checked (error: one line, or None)."""
    try:
        settings = rollout_settings(serial, max_fail_percentage)
    except RolloutSettingsError as exc:
        return {'serial': None, 'max_fail_percentage': None, 'error': str(exc)}
    settings['error'] = None
    return settings


def mig_layout_rollout_serial(serial, check_mode=False):
    """The ``serial`` of the rollout play: ``mig_layout_serial``, or every host in one batch in check mode."""
    return play_serial(serial, check_mode)


def mig_layout_rollout_progress(batch_hosts, hosts, settings, failed, check_mode=False):
    """batch k of n, hosts done, failed, failure budget left (a dict with the one ``line``)."""
    return progress(list(hosts), list(batch_hosts), settings, list(failed), check_mode)


def mig_layout_rollout_unfinished(hosts, hostvars, settings, change):
    """{host: reason} of the hosts the rollout fails: changes that failed, hosts lost, hosts it stopped before."""
    started = []
    errors = {}
    for host in hosts:
        facts = hostvars[host]
        if facts.get('mig_layout_rollout_started'):
            started.append(host)
        if facts.get('mig_layout_rollout_error'):
            errors[host] = str(facts.get('mig_layout_rollout_error'))
    return unfinished(list(hosts), started, errors, settings, change)


def mig_layout_instances(instances):
    """GPU instances (each with ``profile``) as the fleet plan writes them: ``7x1g.10gb``, ``no instances``."""
    return instances_text(instances)


def mig_layout_fleet_plan(hosts, hostvars, layout, check_mode=False):
    """The fleet plan of the rollout from each host's decision and outcome (the facts the rollout and the role leave)."""
    records = []
    for host in hosts:
        facts = hostvars[host]
        decision = facts.get('mig_layout__decision')
        error = facts.get('mig_layout__failure_reason') or facts.get('mig_layout_rollout_error')
        records.append({
            'host': host,
            'started': bool(facts.get('mig_layout_rollout_started')),
            'decision': decision if isinstance(decision, dict) and not decision.get('failed') else None,
            'error': ' '.join(str(error).split()).rstrip('.') if error else None,
            'kubernetes_node': facts.get('mig_layout_k8s_node') or None,
        })
    return fleet_plan(records, layout, check_mode)


def mig_layout_problems(configs, skip=None, document=False):
    """{layout: [problems]} of the layouts other than ``skip``: what would refuse them if they were applied."""
    try:
        return layout_problems(_load(configs, document), skip)
    except LayoutConfigError as exc:
        raise AnsibleFilterError(str(exc))


def mig_layout_gpu_pods(pods, names=None):
    """The pods that hold GPUs or MIG devices (namespace and name), DaemonSet pods left out; only ``names`` if given."""
    return gpu_pods(pods, names)


class FilterModule(object):
    """gpufleet.mig layout filters."""

    def filters(self):
        return {
            'mig_layout_validate': mig_layout_validate,
            'mig_layout_catalog': mig_layout_catalog,
            'mig_layout_preflight': mig_layout_preflight,
            'mig_layout_problems': mig_layout_problems,
            'mig_layout_gpu_pods': mig_layout_gpu_pods,
            'mig_layout_rollout_settings': mig_layout_rollout_settings,
            'mig_layout_rollout_serial': mig_layout_rollout_serial,
            'mig_layout_rollout_progress': mig_layout_rollout_progress,
            'mig_layout_rollout_unfinished': mig_layout_rollout_unfinished,
            'mig_layout_fleet_plan': mig_layout_fleet_plan,
            'mig_layout_instances': mig_layout_instances,
            'mig_layout_host_gpus': mig_layout_host_gpus,
        }

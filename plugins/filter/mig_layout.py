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
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_summary import known_host_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import (
    MEMORY_SLICES_KEY,
    LayoutConfigError,
    check_layout,
    layout_problems,
    validate_configs,
    validate_document,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import (
    decision_gpus,
    device_filters_text,
    may_match_any,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._rollout_plan import (
    RolloutSettingsError,
    fleet_plan,
    hosts_to_change,
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

# libyaml's parser where PyYAML was built with it: the same documents (one safe constructor, PyYAML's), parsed in C
# rather than in Python, for a catalog read once per host of a rollout's pre-flight.
_FAST_LOADER = getattr(yaml, 'CSafeLoader', None)


def _parse_text(text, source):
    """YAML text -> data; a syntax error names the file (``source``) and the line."""
    try:
        if _FAST_LOADER is not None:
            try:
                return yaml.load(text, Loader=_FAST_LOADER)  # nosec B506 - the safe constructor, in C
            except yaml.YAMLError:
                pass  # told as the pure-Python parser tells it, below: one wording whatever the build
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
    'matches': whether layout ``name`` may match one of the host's known ``gpus`` (None when they are unknown),
    'models': those GPUs' models, 'device_filters': the layout's device-filters (for the pre-flight's line)}.
    ``configs`` None is a file the lookup could not read (``errors='ignore'``): one line naming ``source``."""
    if configs is None:
        return {'name': name, 'configs': None, 'matches': None, 'error': (
            'the MIG layout catalog %s cannot be read on the controller (no such file, or not readable); '
            'mig_layout_config_file is a path on the controller, absolute or relative to the playbook' % (source or ''))}
    try:
        validated = _checked(configs, name, document, source)
    except LayoutConfigError as exc:
        return {'name': name, 'configs': None, 'error': str(exc), 'matches': None}
    return _matched({'name': name, 'configs': validated, 'error': None, 'matches': None}, gpus)


def _matched(checked, gpus):
    """``checked`` (a valid catalog check with its layout name) with whether that layout may match the known ``gpus``."""
    name = checked['name']
    if name is None or gpus is None:
        return checked
    layout = checked['configs'][name]
    return dict(checked, matches=may_match_any(layout, gpus), device_filters=device_filters_text(layout),
                models=sorted(set(' '.join(str(p) for p in (g.get('name'), g.get('pci_device_id')) if p) for g in gpus)))


def _variables_of(hostvars):
    """A function giving a host's variables as they are: hostvars.raw_get, the facts as the modules returned them, not
    templated again (ansible/vars/hostvars.py); a plain mapping's own lookup (the unit tests)."""
    return getattr(hostvars, 'raw_get', hostvars.__getitem__)


def mig_layout_host_gpus(decision):
    """The MIG-capable GPUs a host's decision reported (kept as a cached fact for the next pre-flight)."""
    return decision_gpus(decision)


def mig_layout_host_gpus_changed(hosts, hostvars):
    """The hosts of ``hosts`` whose decision (``mig_layout__decision``) told their GPUs (it succeeded, or refused a
    layout that matches none of them) and other GPUs than the ``mig_layout_host_gpus`` they keep: the only ones the
    rollout sets that fact on again (a no-op sets none)."""
    raw = _variables_of(hostvars)
    changed = []
    for host in hosts:
        facts = raw(host)
        told = decision_gpus(facts.get('mig_layout__decision'))
        if told is not None and told != facts.get('mig_layout_host_gpus'):
            changed.append(host)
    return changed


def mig_layout_known_gpus(kept, facts=None, summary=None):
    """A host's MIG-capable GPUs from its fact ``mig_layout_host_gpus`` (``kept``), else its ``nvidia_mig`` facts, else
    its ``nvidia_mig_summary``; None where none tells them (_gpu_summary.known_host_gpus)."""
    return known_host_gpus(kept, facts, summary)


def _known_gpus_of(facts):
    """known_host_gpus of one host's variables as hostvars.raw_get returns them, its decision of this run first."""
    return known_host_gpus(facts.get('mig_layout_host_gpus'), facts.get('nvidia_mig'), facts.get('nvidia_mig_summary'),
                           facts.get('mig_layout__decision'))


def mig_layout_gpus_unknown(hosts, hostvars):
    """The hosts of ``hosts`` whose MIG-capable GPUs the controller does not know (what their decision told, else
    :func:`mig_layout_known_gpus` of their facts, is None): the ones the rollout's pre-flight decides on or reads."""
    raw = _variables_of(hostvars)
    return [host for host in hosts if _known_gpus_of(raw(host)) is None]


def mig_layout_preflight(checks, hosts, hostvars=None):
    """The one line that stops the run before any host is touched, or '' when every check passed.

    ``checks``: each host's result of mig_layout_catalog (or any {'error'}), in the order of ``hosts``. The same
    problem is reported once, with the hosts it concerns ("every host" when all of them). With ``hostvars``, a
    valid check made while its host's GPUs were unknown is completed from the GPUs told since (the pre-flight's first
    decision on the host, else its read of the host's summary; :func:`_known_gpus_of`): one pass on the controller
    instead of a second catalog check per host.
    """
    if hostvars is not None:
        checks = [_read_since(check, host, hostvars) for host, check in zip(hosts, checks)]
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
    # host's GPUs are known (its decision, a cached fact, or the pre-flight's read of its summary) is that sure.
    checks = [check or {} for check in checks]
    if not parts and hosts and all(check.get('matches') is False for check in checks):
        names = sorted(set(str(check.get('name')) for check in checks if check.get('name')))
        models = sorted(set(model for check in checks for model in check.get('models') or []))
        filters = sorted(set(check['device_filters'] for check in checks if check.get('device_filters')))
        parts.append('layout %s (device-filters: %s) matches no GPU of any host of the play (their MIG-capable GPUs: %s): '
                     'it would be declared everywhere and applied nowhere; check its device-filter, devices and %s'
                     % (', '.join(names) or '', ' | '.join(filters) or 'unknown', ', '.join(models) or 'none', MEMORY_SLICES_KEY))
    return ('Nothing was changed: ' + ' | '.join(parts)) if parts else ''


def _read_since(check, host, hostvars):
    """``check`` completed with the GPUs told since it was made (the pre-flight's decision or read), where it lacked
    them."""
    if not check or check.get('matches') is not None or not check.get('configs'):
        return check
    gpus = _known_gpus_of(_variables_of(hostvars)(host))
    return _matched(check, gpus) if gpus is not None else check


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


def mig_layout_rollout_progress(batch_hosts, hosts, settings, failed, check_mode=False, fleet_size=None):
    """batch k of n, hosts done, failed, failure budget left (a dict with the one ``line``); the budget is a percentage
    of ``fleet_size`` hosts (by default those of ``hosts``)."""
    return progress(list(hosts), list(batch_hosts), settings, list(failed), check_mode, fleet_size)


def mig_layout_to_change(hosts, hostvars, check_mode=False):
    """The hosts of ``hosts`` (in order) whose first decision (``mig_layout__decision``) did not find them in the layout:
    the rollout play's hosts (_rollout_plan.hosts_to_change); in check mode, those whose first decision is not the dry
    run's answer."""
    raw = _variables_of(hostvars)
    return hosts_to_change(list(hosts), dict((host, raw(host).get('mig_layout__decision')) for host in hosts), check_mode)


def _done_first(hosts, to_change):
    """The hosts of ``hosts`` outside ``to_change`` (the rollout play's hosts; None: the play took every host)."""
    return set() if to_change is None else set(hosts) - set(to_change)


def mig_layout_rollout_unfinished(hosts, hostvars, settings, change, to_change=None):
    """{host: reason} of the hosts the rollout fails: changes that failed, hosts lost, hosts it stopped before. With
    ``to_change`` (the rollout play's hosts), a host outside it was done before the batches (in its layout)."""
    done_first = _done_first(hosts, to_change)
    started = []
    errors = {}
    for host in hosts:
        facts = hostvars[host]
        if facts.get('mig_layout_rollout_started') or host in done_first:
            started.append(host)
        if facts.get('mig_layout_rollout_error'):
            errors[host] = str(facts.get('mig_layout_rollout_error'))
    return unfinished(list(hosts), started, errors, settings, change)


def mig_layout_instances(instances):
    """GPU instances (each with ``profile``) as the fleet plan writes them: ``7x1g.10gb``, ``no instances``."""
    return instances_text(instances)


# The registered results of the role's applies (tasks/apply.yml, main.yml), in the order they run.
_APPLIES = ('mig_layout__persisted', 'mig_layout__applied', 'mig_layout__declared', 'mig_layout__reapplied')


def _outcome(facts):
    """What a host's facts say happened beyond its decision: whether no decision reached it, whether its failed
    change may have changed a GPU, and the boot persistence error of an apply whose GPUs reached the layout."""
    decision = facts.get('mig_layout__decision')
    applies = [facts.get(name) for name in _APPLIES]
    applies = [result for result in applies if isinstance(result, dict) and not result.get('skipped')]
    failed_apply = [result for result in applies if result.get('failed') or result.get('unreachable')]
    persistence = [((result.get('persistence') or {}).get('error')) for result in applies if result not in failed_apply]
    return {
        'unreachable': isinstance(decision, dict) and bool(decision.get('unreachable')),
        # Touched (tasks/apply.yml sets it just before the apply) and not an apply that says it changed nothing.
        'gpus_changed': bool(facts.get('mig_layout__gpu_touched')) and not any(
            result.get('gpus_changed') is False for result in failed_apply),
        'persistence_error': next((error for error in reversed(persistence) if error), None),
    }


def _decided(decision):
    """A registered decision that succeeded: the module always returns in_layout then (the rollout's first decision
    keeps its failures quiet with failed_when: false, which clears ``failed``)."""
    return (isinstance(decision, dict) and 'in_layout' in decision
            and not any(decision.get(key) for key in ('failed', 'unreachable', 'skipped')))


def mig_layout_fleet_plan(hosts, hostvars, layout, check_mode=False, to_change=None):
    """The fleet plan of the rollout from each host's decision and outcome (the facts the rollout and the role leave).
    With ``to_change`` (the rollout play's hosts), a host outside it was reached by its first decision."""
    done_first = _done_first(hosts, to_change)
    records = []
    for host in hosts:
        facts = hostvars[host]
        decision = facts.get('mig_layout__decision')
        error = facts.get('mig_layout__failure_reason') or facts.get('mig_layout_rollout_error')
        record = {
            'host': host,
            'started': bool(facts.get('mig_layout_rollout_started')) or host in done_first,
            'decision': decision if _decided(decision) else None,
            'error': ' '.join(str(error).split()).rstrip('.') if error else None,
            'kubernetes_node': facts.get('mig_layout_k8s_node') or None,
        }
        record.update(_outcome(facts))
        records.append(record)
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
            'mig_layout_to_change': mig_layout_to_change,
            'mig_layout_host_gpus': mig_layout_host_gpus,
            'mig_layout_host_gpus_changed': mig_layout_host_gpus_changed,
            'mig_layout_gpus_unknown': mig_layout_gpus_unknown,
            'mig_layout_known_gpus': mig_layout_known_gpus,
        }

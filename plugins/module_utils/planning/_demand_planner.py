# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Fleet demand planner: pending pods' MIG requests + every node's GPUs -> one readable plan.

Pure Python: no NVML, no Ansible imports. Inputs are plain data: the pods that wait for
``nvidia.com/mig-<profile>`` resources, each node's GPUs as ``gpufleet.mig.nvidia_mig_facts``
returns them (instances with placements, ``allocated_to`` naming the pods that hold each one)
and a policy. The output is plain data: per node and GPU the target instances and the ordered
actions, the requests each change serves, the unmet demand explained, and per changed node a
generated layout in mig-parted's format for the in-place switch. docs/demand.md explains it.

Decisions:

1. A pod is served whole on one node (a pod runs on one node): all its MIG devices or none.
   Pods are served by priority (highest first), then creation time, then ``namespace/name``.
2. Least disruption first, in passes over every pod still waiting: pass 1 uses instances that
   exist and nobody holds (no change) and creates instances in free slices (create only);
   pass 2 may also destroy idle instances nobody holds (destroy and create); pass 3, only with
   ``evict_below_priority``, may destroy instances held by pods whose priority is below both
   that threshold and the waiting pod's, naming them for eviction. An instance a pod holds, or
   where a process runs, is never touched otherwise; neither is a GPU held whole.
3. Only GPUs of nodes the policy lets reshape change (``reshape_nodes``, default every node);
   on the others only existing free instances serve. At most ``max_gpus_per_run`` GPUs change.
4. The floor (``floor``: per node, the instances each GPU keeps whatever the demand) is never
   destroyed below its count: instances of a floor profile go only while more than the floor remain.
5. Where a new instance goes: the placement that takes the least room from bigger profiles
   (the placeable counts of every profile, largest first, lose the least), on the GPU where that
   loss is least; ties: a GPU already changing, then node, GPU index and start. Destroys: the
   fewest instances (then pods evicted, then memory slices) that make the request fit.
6. Destroyed idle instances are not re-created: nobody waits for them (the declared layout's
   next switch re-creates them).
7. Deterministic: every iteration is over sorted keys; no set or dict order decides anything.
8. Unmet demand: one line per profile, with the cause and the nearest GPU (fewest pods in
   the way of any placement of the profile).
9. With ``release_idle`` (off by default), every idle instance nobody holds and the floor does not
   keep counts as free slices before anything is placed, and is destroyed unless a new instance
   of its profile goes exactly where it is (then it is kept and serves). Instances then live only
   while a pod needs them (above the floor), and requests are placed on free slices instead of
   being bound to instances left wherever earlier demand put them. GPUs that change only by
   releasing count toward ``max_gpus_per_run`` and keep their instances beyond it.
10. Where the pod may run (with ``cluster``: the nodes' objects and the pods): a pod is served only on a node
   kube-scheduler would bind it to (nodeSelector, required node affinity, taints, allocatable CPU and memory
   less what bound pods and the pods served earlier in this plan request: _node_fit); a host without a Node
   object serves nobody. A pod refused everywhere is unmet, its line naming each node's refusal.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DISRUPTION_ORDER, DemandPlanError, _cluster, _pending_pod, _policy
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_placement import (
    _CREATE, _DESTROY_IDLE, _EVICT, _Gpu, _Instance, _floor_allows, _gpus_of, _try_node)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import slice_mask
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._node_fit import NOT_A_NODE_REFUSAL, refusal

LAYOUT_PREFIX = 'demand-'


# ---- the plan -------------------------------------------------------------------------------

def plan_demand(nodes, pending, policy=None, cluster=None):
    """The fleet plan (plain data, see docs/demand.md). Raises DemandPlanError on bad input.

    ``cluster`` (optional): ``{'nodes': {node: Kubernetes Node object}, 'pods': [Pod objects]}``, the rules of
    decision 10; without it no node rule is checked."""
    if not isinstance(pending, list):
        raise DemandPlanError('pending must be a list of pods')
    if not isinstance(nodes, dict):
        raise DemandPlanError('nodes must map each node name to its nvidia_mig facts (or their gpus list)')
    rooms, objects = _cluster(cluster, sorted(nodes))
    pods = [_pending_pod(entry, position, objects) for position, entry in enumerate(pending)]
    names = [p['pod'] for p in pods]
    duplicates = sorted(set(n for n in names if names.count(n) > 1))
    if duplicates:
        raise DemandPlanError('pending: pod %s is listed more than once' % duplicates[0])
    settings = _policy(policy, sorted(nodes))
    gpus = _gpus_of(nodes, settings)
    before = dict((id(g), [i.copy() for i in g.instances]) for g in gpus)
    by_node = {}
    for gpu in gpus:
        by_node.setdefault(gpu.node, []).append(gpu)
    waiting = sorted((p for p in pods if p['requests']), key=lambda p: (-p['priority'], p['created'], p['pod']))
    if settings['release_idle']:
        _release_idle(gpus)
    served = {}
    evicted = {}
    stages = [_CREATE, _DESTROY_IDLE] + ([_EVICT] if settings['evict_below_priority'] is not None else [])
    for stage in stages:
        # What failed stays failed until something is served: the state and the budget change only then.
        failed = set()
        for pod in waiting:
            if pod['pod'] in served:
                continue
            signature = (tuple(sorted(pod['requests'].items())), pod['priority'] if stage == _EVICT else None, pod['rules'])
            if signature in failed:
                continue
            budget_left = None
            if settings['max_gpus_per_run'] is not None:
                budget_left = settings['max_gpus_per_run'] - sum(1 for g in gpus if g.changed)
            best = None
            for node in sorted(by_node):
                if _refused(rooms, pod, node):
                    continue
                tried = _try_node(by_node[node], pod, stage, settings, budget_left, evicted)
                if tried is not None and (best is None or (tried[0], node) < best[0]):
                    best = ((tried[0], node), tried[1], tried[2])
            if best is None:
                failed.add(signature)
                continue
            failed = set()
            node = best[0][1]
            for mine, theirs in zip(by_node[node], best[1]):
                mine.__dict__.update(theirs.__dict__)
            evicted = best[2]
            served[pod['pod']] = node
            if rooms is not None and pod['rules'] is not None:
                rooms[node] = rooms[node].taken(pod['rules'])
    if settings['release_idle']:
        _keep_released_within_budget(gpus, settings['max_gpus_per_run'])
    refused = {}
    for pod in waiting:
        if pod['pod'] not in served:
            reasons = [(node, _refused(rooms, pod, node)) for node in sorted(by_node)]
            refused[pod['pod']] = tuple((node, why) for node, why in reasons if why)
    return _report(gpus, before, pods, waiting, served, evicted, settings, refused)


def _refused(rooms, pod, node):
    """Why ``pod`` may not run on ``node`` (decision 10), or None; nothing is checked without the cluster."""
    if rooms is None:
        return None
    if pod['rules'] is None:   # a pod known only by its requests: it can run on any Kubernetes node
        return NOT_A_NODE_REFUSAL if rooms[node] is None else None
    return refusal(pod['rules'], rooms[node])


def _release_idle(gpus):
    """Decision 9: the idle instances nobody holds and the floor does not keep become free slices."""
    for gpu in gpus:
        if not gpu.reshape:
            continue
        for inst in sorted(gpu.live(), key=lambda i: -i.start):
            if inst.free and _floor_allows(gpu, [inst]):
                inst.gone = True
                inst.released = True


def _really_changed(gpu):
    return any(i.new != i.gone for i in gpu.instances)


def _keep_released_within_budget(gpus, budget):
    """GPUs whose only change is releasing idle instances give them back, last first, beyond the GPU budget."""
    if budget is None:
        return
    changed = [g for g in gpus if _really_changed(g)]
    release_only = [g for g in changed if not any(i.new or (i.gone and not i.released) for i in g.instances)]
    for gpu in reversed(release_only):
        if len(changed) <= budget:
            break
        for inst in gpu.instances:
            if inst.released:
                inst.gone = False
                inst.released = False
        changed.remove(gpu)


def _instance_view(gpu, inst):
    profile = gpu.catalog.get(inst.profile)
    view = {'id': inst.id, 'profile': inst.profile, 'placement': {'start': inst.start, 'size': profile.memory_slices},
            'allocated_to': list(inst.holders)}
    if inst.serves:
        view['serves'] = list(inst.serves)
    return view


def _actions(gpu, evicted):
    actions = []
    for inst in sorted((i for i in gpu.instances if i.gone and not i.new), key=lambda i: i.start):
        profile = gpu.catalog.get(inst.profile)
        action = {'action': 'destroy_gpu_instance', 'gpu_instance_id': inst.id, 'profile': inst.profile,
                  'placement': {'start': inst.start, 'size': profile.memory_slices}}
        if inst.holders:
            action['evict'] = [h for h in inst.holders if h in evicted]
        actions.append(action)
    for inst in sorted((i for i in gpu.instances if i.new and not i.gone), key=lambda i: i.start):
        profile = gpu.catalog.get(inst.profile)
        full = profile.full_compute_profile
        actions.append({'action': 'create_gpu_instance', 'profile': inst.profile, 'profile_id': profile.id,
                        'placement': {'start': inst.start, 'size': profile.memory_slices},
                        'compute_instance': full.name if full is not None else inst.profile, 'serves': list(inst.serves)})
    return actions


def _mig_devices(gpu):
    """The GPU's target instances as mig-parted ``mig-devices`` (compute instances kept as they are)."""
    devices = {}
    for inst in gpu.live():
        keys = [inst.profile]
        if inst.compute_instances and inst.compute_instances != (inst.profile,):
            keys = list(inst.compute_instances)
        for key in keys:
            devices[key] = devices.get(key, 0) + 1
    return devices


def generated_layout(node_gpus):
    """{'name', 'config'}: one mig-parted entry per MIG GPU of the node (``devices: [index]``), named
    ``demand-<hash of the entries>``, so the same target always gets the same name."""
    entries = [{'devices': [gpu.index], 'mig-enabled': True, 'mig-devices': _mig_devices(gpu)}
               for gpu in sorted(node_gpus, key=lambda g: g.index)]
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode('utf-8')).hexdigest()[:12]
    name = LAYOUT_PREFIX + digest
    return {'name': name, 'config': {name: entries}}


def layout_with_creates(node, gpus, creates, destroys=()):
    """:func:`generated_layout` of a node whose GPUs ``gpus`` (its annotation's, or nvidia_mig facts) lose the instances
    ``destroys`` ((GPU index, start) each) and gain the instances ``creates`` ((GPU index, profile, start) each): the
    layout a demand run applies for decisions taken elsewhere (the event source's gated queue), named as the planner
    names its own."""
    node_gpus = dict((g.index, g) for g in (_Gpu(node, gpu, False, None) for gpu in gpus))
    for index, start in destroys:
        instance = next((i for i in node_gpus[index].instances if i.start == start), None) if index in node_gpus else None
        if instance is None:
            raise DemandPlanError('node %s has no instance at slice %s of GPU %s to destroy' % (node, start, index))
        instance.gone = True
    for index, profile, start in creates:
        if index not in node_gpus:
            raise DemandPlanError('node %s has no GPU %s to create %s on' % (node, index, profile))
        node_gpus[index].instances.append(_Instance(None, profile, start, new=True))
    return generated_layout(node_gpus.values())


def _report(gpus, before, pods, waiting, served, evicted, settings, refused):
    nodes = {}
    for node in sorted(set(g.node for g in gpus)):
        node_gpus = [g for g in gpus if g.node == node]
        gpu_views = []
        worst = 'none'
        for gpu in node_gpus:
            actions = _actions(gpu, evicted)
            if any(a['action'] == 'destroy_gpu_instance' and a.get('evict') for a in actions):
                level = 'evict'
            elif any(a['action'] == 'destroy_gpu_instance' for a in actions):
                level = 'destroy-idle'
            elif actions:
                level = 'create-only'
            else:
                level = 'none'
            if DISRUPTION_ORDER.index(level) > DISRUPTION_ORDER.index(worst):
                worst = level
            gpu_views.append({
                'index': gpu.index, 'uuid': gpu.uuid, 'changed': bool(actions), 'disruption': level,
                'before': [_instance_view(gpu, i) for i in before[id(gpu)]],
                'target': [_instance_view(gpu, i) for i in sorted(gpu.live(), key=lambda i: i.start)],
                'actions': actions,
            })
        view = {'disruption': worst, 'changed': worst != 'none', 'cordon': worst in ('destroy-idle', 'evict'),
                'evictions': sorted(p for p, by in evicted.items() if any(p in i.holders for g in node_gpus for i in g.instances if i.gone)),
                'gpus': gpu_views}
        if view['changed']:
            view['layout'] = generated_layout(node_gpus)
        nodes[node] = view
    served_list = []
    for pod in waiting:
        if pod['pod'] in served:
            node = served[pod['pod']]
            devices = []
            for gpu in (g for g in gpus if g.node == node):
                for inst in sorted(gpu.live(), key=lambda i: i.start):
                    if pod['pod'] in inst.serves:
                        devices.append({'gpu': gpu.index, 'profile': inst.profile, 'start': inst.start,
                                        'instance': inst.id if not inst.new else 'new'})
            served_list.append({'pod': pod['pod'], 'node': node, 'devices': devices})
    unmet_pods = [p for p in waiting if p['pod'] not in served]
    why = _explain_unmet(gpus, unmet_pods, settings, refused)
    unmet = [why[key] for key in sorted(why)]
    changed = sum(1 for g in gpus if _really_changed(g))
    lines = []
    for node in sorted(nodes):
        if nodes[node]['changed']:
            for gpu in nodes[node]['gpus']:
                if gpu['changed']:
                    lines.append('%s GPU %s (%s): %s' % (node, gpu['index'], gpu['disruption'], '; '.join(_action_text(a) for a in gpu['actions'])))
    lines.extend(unmet)
    lines.append('%d of %d waiting pod(s) served, %d GPU(s) changed, %d pod(s) to evict'
                 % (len(served_list), len(waiting), changed, len(evicted)))
    # Per unmet pod, the lines of the profiles it asks for: the reason told on the pod (an Event).
    unmet_reasons = dict((p['pod'], [why[(profile, refused[p['pod']])] for profile in sorted(p['requests'])]) for p in unmet_pods)
    return {'nodes': nodes, 'served': served_list, 'unmet': unmet, 'unmet_pods': [p['pod'] for p in unmet_pods],
            'unmet_reasons': unmet_reasons, 'evictions': sorted(evicted), 'gpus_changed': changed, 'lines': lines}


def _action_text(action):
    where = '%s at %d' % (action['profile'], action['placement']['start'])
    if action['action'] == 'create_gpu_instance':
        return 'create %s for %s' % (where, ', '.join(action['serves']))
    text = 'destroy %s (id %s)' % (where, action['gpu_instance_id'])
    if action.get('evict'):
        text += ', evicting %s' % ', '.join(action['evict'])
    return text


def _in_the_way(gpu, profile):
    """(key, pods, instances with processes outside pods) in the way of the nearest placement of ``profile``.

    Nearest: the fewest instances with processes no pod owns (they never move), then the fewest
    pods, then the fewest instances in use."""
    best = None
    for start in profile.starts:
        bits = slice_mask(start, profile.memory_slices)
        blocking = [i for i in gpu.live()
                    if slice_mask(i.start, gpu.catalog.get(i.profile).memory_slices) & bits and (i.holders or i.pids or i.serves)]
        pods = sorted(set(h for i in blocking for h in list(i.holders) + list(i.serves)))
        processes = sum(1 for i in blocking if i.pids and not i.holders)
        key = (processes, len(pods), len(blocking), start)
        if best is None or key < best[0]:
            best = (key, pods, processes)
    return best


def _explain_unmet(gpus, unmet_pods, settings, refused):
    """{(profile, the nodes refused and why): the one line that explains that unmet demand}.

    Pods the same nodes refuse for the same reasons share a line; without refusals it is one line per profile."""
    wanted = {}
    for pod in unmet_pods:
        for profile, count in pod['requests'].items():
            entry = wanted.setdefault((profile, refused[pod['pod']]), [0, []])
            entry[0] += count
            entry[1].append(pod['pod'])
    lines = {}
    for key in sorted(wanted):
        profile_name, out = key
        count, pods = wanted[key]
        head = '%s: %d device(s) for %s unmet' % (profile_name, count, ', '.join(pods))
        offering_anywhere = [g for g in gpus if g.catalog.get(profile_name) is not None]
        if not offering_anywhere:
            lines[key] = '%s: no GPU of the fleet offers this profile' % head
            continue
        out_nodes = dict(out)
        refusals = '; '.join('%s: %s' % (node, why) for node, why in out
                             if any(g.node == node for g in offering_anywhere))
        offering = [g for g in offering_anywhere if g.node not in out_nodes]
        if not offering:
            lines[key] = '%s: no node it may run on offers this profile (%s)' % (head, refusals)
            continue
        lines[key] = _explain_offered(gpus, offering, profile_name, head, settings) + \
            (' (it may not run on %s)' % refusals if refusals else '')
    return lines


def _explain_offered(gpus, offering, profile_name, head, settings):
    """The line of a profile some GPU the pods may use offers: why none serves, and the nearest one."""
    open_gpus = [g for g in offering if g.reshape]
    if not open_gpus:
        return ('%s: only nodes the policy does not let reshape offer it (%s)'
                % (head, ', '.join(sorted(set(g.node for g in offering)))))
    budget = settings['max_gpus_per_run']
    changed = sum(1 for g in gpus if _really_changed(g))
    nearest = None
    for gpu in open_gpus:
        way = _in_the_way(gpu, gpu.catalog.get(profile_name))
        if nearest is None or (way[0], gpu.node, gpu.index) < nearest[0]:
            nearest = ((way[0], gpu.node, gpu.index), gpu, way[1], way[2])
    dummy, gpu, in_way, processes = nearest
    if budget is not None and changed >= budget and not in_way and not processes:
        return '%s: max_gpus_per_run (%d) reached; nearest is %s' % (head, budget, gpu.label())
    whole = gpu.catalog.get(profile_name).memory_slices == gpu.catalog.total_slices
    cause = 'no GPU is free of pods' if whole else 'no GPU has room for it without touching instances pods hold'
    if not in_way and not processes:
        cause = 'the floor or the other waiting pods keep every placement taken'
    detail = '%d pod(s)%s' % (len(in_way), (' (%s)' % ', '.join(in_way)) if in_way else '')
    if processes:
        detail += ', processes outside pods on %d instance(s)' % processes
    return '%s: %s; nearest is %s, %s' % (head, cause, gpu.label(), detail)

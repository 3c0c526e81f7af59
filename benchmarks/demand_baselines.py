# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The demand benchmark's baselines (benchmarks/demand.py): the policies the shipped collection is compared with.

The baselines, each with its reconfiguration latency (seconds, printed in demand.py's header):

- (a) static: every GPU keeps the shipped layout ``all-balanced`` (roles/mig_layout/files/catalog.yml).
- (b) day/night: the shipped ``daytime`` layout at 08:00 and ``nighttime`` at 20:00 (the AWX schedules), through
  the in-place switch (plan_gpu of _mig_planner, the held instances kept): one run of ``--run-seconds``; a node whose
  change destroys instances is cordoned meanwhile.
- (c) NVIDIA's DRA driver with dynamic MIG (kubernetes-sigs/dra-driver-nvidia-gpu v0.4, alpha): every possible
  placement is a device ``gpu-<N>-mig-<profile>-<id>-<start>``, allocated in name order, so on the node the
  scheduler picked, the lowest start on the first GPU that fits; the instance is created when the kubelet prepares
  the claim and destroyed when it unprepares it. ``--dra-seconds`` from binding to the pod running (the driver's
  CI asserts a pod Ready on a dynamically created 1g slice within 10 s on GB200: docs/eda.md).
- (d) nos-inspired (nebuly-ai/nos, archived): pending pods are batched (a batch closes 10 s after its last pod or
  60 s after its first, as nos does); then, per pod, the first GPU whose free instances, destroyed, leave room gets
  the pod's profile at its lowest start and the destroyed ones back where they still fit; ``--nos-seconds`` for the
  agent's change, the device plugin's restart and the node status. Not nos: no per-model geometry lists, no NVML
  auto-placement retries, no scheduler simulation before choosing; instances stay when pods leave. Never cordons.

And two ceilings, which no real system reaches: what packing alone could add. Each is the DRA model (created when
bound, destroyed when the pod ends, the same latency) with MIG's placement rules lifted:

- (z) GPU pooled: a GPU's slices are one pool; a pod fits a GPU while its memory and compute slices not taken cover
  the profile's (no starts, so nothing on a GPU is ever fragmented);
- (z) node pooled: a node's slices are one pool, the GPUs' boundaries lifted too (no fragmentation at all).
"""

from __future__ import absolute_import, division, print_function

from demand_replay import POLICY, Debounced, Gpu, Replay

DRA_SECONDS = 10.0
# Assumed for nos: its agent's NVML changes, the device plugin's restart and a stock kubelet's status period.
NOS_SECONDS = 20.0


class StaticLayout(Replay):
    """(a): one layout ({model: {profile: count}}) on every GPU, never changed."""
    label = '(a) static all-balanced'

    def __init__(self, requests, options, seed, layout):
        super(StaticLayout, self).__init__(requests, options, seed)
        self.layout = layout

    def start(self):
        for gpu in self.gpus:
            gpu.converge(self.layout[gpu.model])


class DayNight(Replay):
    """(b): daytime at 08:00 and nighttime at 20:00 through the in-place switch (one run, cordon where it destroys)."""
    label = '(b) day/night schedule'

    def __init__(self, requests, options, seed, layouts):
        super(DayNight, self).__init__(requests, options, seed)
        self.layouts = layouts

    def start(self):
        for gpu in self.gpus:
            gpu.converge(self.layouts['nighttime'][gpu.model])
        for day in range(int(self.options.hours // 24) + 1):
            for hour, name in ((8, 'daytime'), (20, 'nighttime')):
                self.at((day * 24 + hour) * 3600.0, POLICY, self.switch, name)

    def switch(self, name):
        self.runs += 1
        for node in self.nodes:
            trial = [Gpu(g.node, g.index, g.model) for g in self.gpus if g.node == node]
            for copy, gpu in zip(trial, [g for g in self.gpus if g.node == node]):
                copy.instances = [list(i) for i in gpu.instances]
                copy.next_id = gpu.next_id
            if any(a['action'] == 'destroy_gpu_instance' for copy in trial for a in copy.converge(self.layouts[name][copy.model])):
                self.cordons += 1
                self.cordoned[node] = self.now + self.options.run_seconds
        self.at(self.now + self.options.run_seconds, POLICY, self.apply, name)

    def apply(self, name):
        for gpu in self.gpus:
            self.reconfigured(gpu.converge(self.layouts[name][gpu.model]))
        self.schedule_waiting()


class DraDynamicMig(Replay):
    """(c): NVIDIA's DRA driver, dynamic MIG: a device per placement, created at prepare, destroyed at unprepare."""
    label = '(c) DRA dynamic MIG'

    @property
    def start_seconds(self):
        return self.options.dra_seconds

    def device_on(self, node, profile):
        for gpu in self.gpus:
            if gpu.node == node and gpu.lowest_start(profile) is not None:
                return gpu, None
        return None

    def prepare(self, gpu, profile):
        self.reconfigurations += 1
        return gpu.create(profile, gpu.lowest_start(profile))

    def released(self, request):
        request.gpu.instances.remove(request.instance)
        self.reconfigurations += 1


class NosInspired(Debounced):
    """(d): batches of pending pods; per pod, the first GPU whose free instances, destroyed, make room."""
    label = '(d) nos-inspired'

    def closed(self):
        self.at(self.now + self.options.nos_seconds, POLICY, self.partition)

    def partition(self):
        self.runs += 1
        changed = set()
        for request in sorted(self.waiting, key=lambda r: (r.arrival, r.number)):
            if any(g.free_instance(request.profile) is not None for g in self.gpus):
                continue
            for gpu in self.gpus:
                free = [i for i in gpu.instances if i[3] is None]
                start = gpu.lowest_start(request.profile, gpu.occupancy(without=free))
                if start is None:
                    continue
                for instance in free:
                    gpu.instances.remove(instance)
                gpu.create(request.profile, start)
                for instance in sorted(free, key=lambda i: i[2]):
                    again = gpu.lowest_start(instance[1])
                    if again is not None:
                        gpu.create(instance[1], again)
                changed.add((gpu.node, gpu.index))
                break
        self.reconfigurations += len(changed)
        self.schedule_waiting()


class PooledGpu(Gpu):
    """A GPU of the ceilings: its memory and compute slices one pool, no placement rules. Its occupancy is the
    (memory, compute) slices taken; every instance starts at 0."""

    def __init__(self, node, index, model):
        super(PooledGpu, self).__init__(node, index, model)
        self.compute_slices = max(p.compute_slices for p in self.catalog.profiles.values())

    def occupancy(self, without=()):
        taken = [self.catalog.get(i[1]) for i in self.instances if i not in without]
        return sum(p.memory_slices for p in taken), sum(p.compute_slices for p in taken)

    def lowest_start(self, profile_name, occupancy=None):
        profile = self.catalog.get(profile_name)
        if profile is None:
            return None
        memory, compute = occupancy or self.occupancy()
        fits = memory + profile.memory_slices <= self.catalog.total_slices and compute + profile.compute_slices <= self.compute_slices
        return 0 if fits else None


class GpuPooledCeiling(DraDynamicMig):
    """(z): the DRA model on GPUs without placement rules (:class:`PooledGpu`): what a perfect packer inside each GPU
    could place."""
    label = '(z) ceiling: GPU pooled'
    gpu_class = PooledGpu

    def stranded_slices(self):
        return 0   # a pool strands nothing


class NodePooledCeiling(GpuPooledCeiling):
    """(z): a node's GPUs one pool too: what no fragmentation at all would place."""
    label = '(z) ceiling: node pooled'

    def device_on(self, node, profile):
        gpus = [g for g in self.gpus if g.node == node]
        wanted = gpus[0].catalog.get(profile)
        if wanted is None:
            return None
        taken = [(g.occupancy(), g) for g in gpus]
        if sum(t[0][0] for t in taken) + wanted.memory_slices > sum(g.catalog.total_slices for g in gpus) or \
                sum(t[0][1] for t in taken) + wanted.compute_slices > sum(g.compute_slices for g in gpus):
            return None
        return min(taken, key=lambda t: (t[0][0], t[1].index))[1], None

    def had_room(self, request):
        return any(self.device_on(node, request.profile) is not None for node in self.nodes)

    def prepare(self, gpu, profile):
        self.reconfigurations += 1
        return gpu.create(profile, 0)

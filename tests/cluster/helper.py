# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small helpers for tests/cluster/cluster.sh (standard library only; run as python3 helper.py ...).

  helper.py ports N                 print N distinct free loopback TCP ports
  helper.py nodes SPEC SERVER TOKEN CA
                                    create the fake nodes described in SPEC (JSON)
  helper.py watch-node NODE SERVER TOKEN CA OUT TIMEOUT
                                    append one JSON line to OUT per change of the node's MIG
                                    labels, cordon or annotations, from a watch; exit 0 once
                                    nvidia.com/mig.config.state went pending and then to success
                                    or failed, 1 after TIMEOUT seconds; meanwhile, as a kubelet
                                    would, delete for good the node's pods marked for deletion

  helper.py watch-switch NODE NAMESPACE SERVER TOKEN CA OUT STOP TIMEOUT
                                    list, then watch, the node and the pods of NAMESPACE while a
                                    MIG switch runs; one JSON line per change to OUT (the node's
                                    MIG labels, cordon, annotations and allocatable nvidia.com/*
                                    resources; each pod's UID, phase, restartCount, deletion and
                                    eviction), a {"kind": "ready"} line once both lists are in;
                                    once the file STOP exists: the objects as they are then and a
                                    {"kind": "summary"} line, exit 0; exit 1 after TIMEOUT seconds
  helper.py sim-host STATE PROFILE@START...
                                    write the simulated host of the real node: one
                                    A100-SXM4-80GB (minor number 2), MIG enabled, these GPU instances (each with its
                                    full-size compute instance); through the NVML simulator
  helper.py sim-pids STATE START PID...
                                    the processes now running on the compute instance of the GPU
                                    instance placed at START on GPU 0 (no PID: none)

A node in SPEC is {"name", "labels", "resources", "unschedulable"}: the Node is
created WITH its status (the API server keeps status on create), as kwok does, so
no kubelet is needed for the scheduler to place pods on it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request

# What every fake node has besides its GPU resources; "pods" matters: without
# it the scheduler's NodeResourcesFit rejects every pod.
BASE_RESOURCES = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}


def free_ports(count):
    # Hold all sockets open until every port is picked so the N are distinct.
    socks = []
    try:
        for dummy in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def node_object(spec):
    unknown = set(spec) - {"name", "labels", "resources", "unschedulable"}
    if unknown:
        raise ValueError("node %r: unknown keys %s" % (spec.get("name"), sorted(unknown)))
    name = spec["name"]
    resources = dict(BASE_RESOURCES)
    resources.update({k: str(v) for k, v in spec.get("resources", {}).items()})
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    labels.update({k: str(v) for k, v in spec.get("labels", {}).items()})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        # No taints: nothing would ever remove a not-ready taint from a fake node.
        "spec": {"unschedulable": bool(spec.get("unschedulable", False))},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "FakeNodeReady",
                "message": "fake node created by tests/cluster",
            }],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "fake", "operatingSystem": "linux", "architecture": "amd64"},
        },
    }


def create_nodes(spec_file, server, token, ca_file):
    with open(spec_file) as f:
        specs = json.load(f)
    ctx = ssl.create_default_context(cafile=ca_file)
    for spec in specs:
        node = node_object(spec)
        req = urllib.request.Request(
            server + "/api/v1/nodes",
            data=json.dumps(node).encode(),
            method="POST",
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
                created = json.load(resp)
        except urllib.error.HTTPError as e:
            raise SystemExit("creating node %s failed: %s %s" % (node["metadata"]["name"], e.code, e.read().decode()))
        # A status dropped on create would make every later scheduling test
        # meaningless: check it stuck.
        if created.get("status", {}).get("allocatable") != node["status"]["allocatable"]:
            raise SystemExit("node %s was created without its allocatable resources" % node["metadata"]["name"])
        print(node["metadata"]["name"])


MIG_STATE = "nvidia.com/mig.config.state"


def node_view(node):
    """What the mig_layout role changes on a node, in one comparable dict."""
    labels = node["metadata"].get("labels", {})
    return {
        "state": labels.get(MIG_STATE),
        "config": labels.get("nvidia.com/mig.config"),
        "deploy": {k: v for k, v in labels.items() if k.startswith("nvidia.com/gpu.deploy.")},
        "unschedulable": bool(node.get("spec", {}).get("unschedulable", False)),
        "annotations": sorted(k for k in node["metadata"].get("annotations", {}) if k.startswith("gpufleet.mig/")),
    }


def finish_deleted_pods(name, server, token, ctx, timeout):
    """Stand in for the node's kubelet where none runs: a pod of the node marked for deletion (a DaemonSet's
    pod whose node label was paused, an evicted pod) is deleted for good with grace period 0, as the kubelet
    does once its containers stopped (pkg/kubelet/status/status_manager.go, canBeDeleted then Delete with
    GracePeriodSeconds 0)."""
    req = urllib.request.Request(
        "%s/api/v1/pods?watch=true&fieldSelector=spec.nodeName%%3D%s&timeoutSeconds=%d" % (server, name, int(timeout)),
        headers={"Authorization": "Bearer " + token},
    )
    with urllib.request.urlopen(req, context=ctx, timeout=int(timeout) + 10) as resp:
        for line in resp:
            event = json.loads(line)
            meta = event.get("object", {}).get("metadata", {})
            if event.get("type") not in ("ADDED", "MODIFIED") or "deletionTimestamp" not in meta:
                continue
            delete = urllib.request.Request(
                "%s/api/v1/namespaces/%s/pods/%s" % (server, meta["namespace"], meta["name"]), method="DELETE",
                data=json.dumps({"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}).encode(),
                headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
            )
            try:
                urllib.request.urlopen(delete, context=ctx, timeout=30).close()
            except urllib.error.HTTPError as exc:
                if exc.code not in (404, 409):  # gone already, or a new pod of the same name
                    raise


def watch_node(name, server, token, ca_file, out_file, timeout):
    ctx = ssl.create_default_context(cafile=ca_file)
    # No kubelet runs behind the fake node: pods marked for deletion there would keep their deletionTimestamp.
    threading.Thread(target=finish_deleted_pods, args=(name, server, token, ctx, timeout), daemon=True).start()
    req = urllib.request.Request(
        "%s/api/v1/nodes?watch=true&fieldSelector=metadata.name%%3D%s&timeoutSeconds=%d" % (server, name, int(timeout)),
        headers={"Authorization": "Bearer " + token},
    )
    last = None
    seen_pending = False
    with urllib.request.urlopen(req, context=ctx, timeout=int(timeout) + 10) as resp, open(out_file, "a") as out:
        # One JSON event per line; the first is the node as it is now (ADDED).
        for line in resp:
            event = json.loads(line)
            if event.get("type") not in ("ADDED", "MODIFIED"):
                continue
            view = node_view(event["object"])
            if view != last:
                out.write(json.dumps(view, sort_keys=True) + "\n")
                out.flush()
                last = view
            seen_pending = seen_pending or view["state"] == "pending"
            if seen_pending and view["state"] in ("success", "failed"):
                return
    raise SystemExit("node %s: no pending -> success/failed within %ss" % (name, timeout))


def api_get(server, token, ctx, path):
    req = urllib.request.Request(server + path, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
        return json.load(resp)


def node_switch_view(node):
    """node_view plus the nvidia.com/* resources the node can hand out (0 left out)."""
    view = node_view(node)
    allocatable = node.get("status", {}).get("allocatable", {})
    view["allocatable"] = {k: int(v) for k, v in allocatable.items() if k.startswith("nvidia.com/") and int(v) > 0}
    return view


def pod_view(pod):
    """What an in-place switch must leave alone on a pod, and how an eviction shows."""
    status = pod.get("status", {})
    containers = status.get("containerStatuses") or [{}]
    disruption = [c.get("reason") for c in status.get("conditions", []) if c.get("type") == "DisruptionTarget"
                  and c.get("status") == "True"]
    return {
        "name": pod["metadata"]["name"],
        "uid": pod["metadata"]["uid"],
        "phase": status.get("phase"),
        "restarts": sum(c.get("restartCount", 0) for c in containers),
        "running": all("running" in c.get("state", {}) for c in containers),
        "deleting": "deletionTimestamp" in pod["metadata"],
        "disruption": disruption[0] if disruption else None,
        "node": pod.get("spec", {}).get("nodeName"),
    }


class SwitchRecorder(object):
    """The JSON lines of watch-switch, written by two watch threads, and their summary."""

    def __init__(self, out):
        self.out = out
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.last = {}
        self.pods = {}
        self.node = {"states": [], "allocatable": [], "unschedulable": [], "views": 0}
        self.errors = []

    def record(self, kind, event, view):
        with self.lock:
            key = (kind, view.get("name"))
            if event != "DELETED" and self.last.get(key) == view:
                return
            self.last[key] = view
            # t: seconds since the watch started; at: the wall clock, to line the watch up with other logs.
            line = dict(view, kind=kind, event=event, t=round(time.monotonic() - self.started, 2), at=round(time.time(), 3))
            self.out.write(json.dumps(line, sort_keys=True) + "\n")
            self.out.flush()
            if kind == "node":
                self._add(self.node["states"], view["state"])
                self._add(self.node["allocatable"], view["allocatable"])
                self._add(self.node["unschedulable"], view["unschedulable"])
                self.node["views"] += 1
                return
            pod = self.pods.setdefault(view["name"], {
                "uids": [], "phases": [], "restarts": [], "deleted": False, "gone": False, "evicted": False,
                "running_throughout": True})
            self._add(pod["uids"], view["uid"])
            self._add(pod["phases"], view["phase"])
            self._add(pod["restarts"], view["restarts"])
            pod["deleted"] = pod["deleted"] or view["deleting"] or event == "DELETED"
            pod["gone"] = pod["gone"] or event == "DELETED"
            pod["evicted"] = pod["evicted"] or view["disruption"] == "EvictionByEvictionAPI"
            pod["running_throughout"] = pod["running_throughout"] and view["phase"] == "Running" and view["running"] \
                and not view["deleting"] and event != "DELETED"

    @staticmethod
    def _add(values, value):
        if not values or values[-1] != value:
            values.append(value)

    def marker(self, kind):
        with self.lock:
            self.out.write(json.dumps({"kind": kind}) + "\n")
            self.out.flush()

    def summary(self):
        with self.lock:
            line = {"kind": "summary", "node": self.node, "pods": self.pods, "errors": self.errors,
                    "seconds": round(time.monotonic() - self.started, 1)}
            self.out.write(json.dumps(line, sort_keys=True) + "\n")
            self.out.flush()


def watch_stream(server, token, ctx, path, resource_version, timeout, on_event, recorder):
    """Follow one watch from ``resource_version`` until the API server ends it (TIMEOUT)."""
    sep = "&" if "?" in path else "?"
    req = urllib.request.Request(
        "%s%s%swatch=true&resourceVersion=%s&timeoutSeconds=%d" % (server, path, sep, resource_version, int(timeout)),
        headers={"Authorization": "Bearer " + token},
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=int(timeout) + 10) as resp:
            for line in resp:
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    recorder.errors.append(event.get("object", {}).get("message", "watch error"))
                    return
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    on_event(event["type"], event["object"])
    except Exception as exc:  # reported in the summary: a watch that died saw nothing more
        recorder.errors.append("%s: %s" % (path, exc))


def watch_switch(node, namespace, server, token, ca_file, out_file, stop_file, timeout):
    ctx = ssl.create_default_context(cafile=ca_file)
    timeout = float(timeout)
    deadline = time.monotonic() + timeout
    node_path = "/api/v1/nodes?fieldSelector=metadata.name%%3D%s" % node
    pods_path = "/api/v1/namespaces/%s/pods" % namespace
    with open(out_file, "a") as out:
        recorder = SwitchRecorder(out)

        def on_node(event, obj):
            recorder.record("node", event, node_switch_view(obj))

        def on_pod(event, obj):
            recorder.record("pod", event, pod_view(obj))

        # List, then watch from the list's resourceVersion: nothing between the two is missed.
        nodes = api_get(server, token, ctx, node_path)
        if len(nodes["items"]) != 1:
            raise SystemExit("watch-switch: no node %s" % node)
        for item in nodes["items"]:
            on_node("LISTED", item)
        pods = api_get(server, token, ctx, pods_path)
        for item in pods["items"]:
            on_pod("LISTED", item)
        threads = [
            threading.Thread(target=watch_stream, args=(server, token, ctx, node_path, nodes["metadata"]["resourceVersion"],
                                                        timeout, on_node, recorder)),
            threading.Thread(target=watch_stream, args=(server, token, ctx, pods_path, pods["metadata"]["resourceVersion"],
                                                        timeout, on_pod, recorder)),
        ]
        for thread in threads:
            thread.daemon = True
            thread.start()
        recorder.marker("ready")
        while not os.path.exists(stop_file):
            if time.monotonic() >= deadline:
                raise SystemExit("watch-switch: %s did not appear within %ss" % (stop_file, timeout))
            if not any(thread.is_alive() for thread in threads):
                raise SystemExit("watch-switch: the watches ended before %s appeared: %s"
                                 % (stop_file, "; ".join(recorder.errors) or "the API server closed them"))
            time.sleep(0.2)
        # What the API server said last may still be on its way through the watches.
        time.sleep(0.5)
        for item in api_get(server, token, ctx, node_path)["items"]:
            on_node("FINAL", item)
        for item in api_get(server, token, ctx, pods_path)["items"]:
            on_pod("FINAL", item)
        recorder.summary()


A100_80GB = "A100-SXM4-80GB"
REAL_NODE_GPU_MINOR = 2


def simulator():
    """The repository's NVML simulator package (a test double: simulator/ beside tests/)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from tests.support.simulator import simulator_on_path
    simulator_on_path()
    import gpufleet_nvml_sim.host_events
    import gpufleet_nvml_sim.models
    import gpufleet_nvml_sim.rules
    import gpufleet_nvml_sim.state
    return gpufleet_nvml_sim


def parse_placement(text):
    profile, sep, start = text.partition("@")
    if not sep or not start.isdigit():
        raise SystemExit("sim-host: %r is not PROFILE@START (e.g. 1g.10gb@0)" % text)
    return {"profile": profile, "start": int(start), "compute_instances": [{"profile": profile}]}


def placement_gi_id(profile_name, start):
    """The GPU instance id a placement keeps across sim-host calls: the simulator numbers instances it
    is not given in rotation, as drivers do, so the instance at a start would get another id (and MIG
    UUID, derived from it) each time the host is laid out anew, and a pod placed on it earlier would
    seem to hold another instance. The id is the placement's node in the memory-slice tree: the first
    id of the profile's size range plus its memory start over its memory size."""
    sim = simulator()
    model = sim.models.get_model(A100_80GB)
    profile = sim.rules.profile_by_name(model, profile_name)
    if profile is None:
        raise SystemExit("sim-host: %s has no GPU instance profile %r" % (A100_80GB, profile_name))
    return sim.rules.id_range(model, profile)[0] + start // profile["memory_slices"]


def sim_host(state_file, placements):
    instances = [parse_placement(p) for p in placements]
    for instance in instances:
        instance["id"] = placement_gi_id(instance["profile"], instance["start"])
    # /dev/nvidia2, not its NVML index 0: the DRA driver's device names (dra_plugin.py) carry the minor number.
    state = {"gpus": [{"model": A100_80GB, "minor_number": REAL_NODE_GPU_MINOR, "mig": {"current": "enabled"}, "gpu_instances": instances}]}
    directory = os.path.dirname(os.path.abspath(state_file))
    if not os.path.isdir(directory):
        os.makedirs(directory)
    simulator().state.write_state(state_file, state)


def sim_pids(state_file, start, pids):
    sim = simulator()
    state = sim.state.load_state(state_file)
    found = [gi for gi in state["gpus"][0]["gpu_instances"] if gi["start"] == int(start)]
    if len(found) != 1 or len(found[0]["compute_instances"]) != 1:
        raise SystemExit("sim-pids: GPU 0 has no GPU instance with one compute instance at start %s" % start)
    sim.host_events.set_pids(state_file, 0, found[0]["id"], found[0]["compute_instances"][0]["id"], [int(p) for p in pids])


def main(argv):
    if len(argv) == 2 and argv[0] == "ports":
        print(" ".join(str(p) for p in free_ports(int(argv[1]))))
    elif len(argv) == 5 and argv[0] == "nodes":
        create_nodes(*argv[1:])
    elif len(argv) == 7 and argv[0] == "watch-node":
        watch_node(*argv[1:])
    elif len(argv) == 9 and argv[0] == "watch-switch":
        watch_switch(*argv[1:])
    elif len(argv) >= 2 and argv[0] == "sim-host":
        sim_host(argv[1], argv[2:])
    elif len(argv) >= 3 and argv[0] == "sim-pids":
        sim_pids(argv[1], argv[2], argv[3:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])

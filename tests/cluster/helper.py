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
                                    or failed, 1 after TIMEOUT seconds

A node in SPEC is {"name", "labels", "resources", "unschedulable"}: the Node is
created WITH its status (the API server keeps status on create), as kwok does, so
no kubelet is needed for the scheduler to place pods on it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket
import ssl
import sys
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


def watch_node(name, server, token, ca_file, out_file, timeout):
    ctx = ssl.create_default_context(cafile=ca_file)
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


def main(argv):
    if len(argv) == 2 and argv[0] == "ports":
        print(" ".join(str(p) for p in free_ports(int(argv[1]))))
    elif len(argv) == 5 and argv[0] == "nodes":
        create_nodes(*argv[1:])
    elif len(argv) == 7 and argv[0] == "watch-node":
        watch_node(*argv[1:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])

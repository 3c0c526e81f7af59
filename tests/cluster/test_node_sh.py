# -*- coding: utf-8 -*-
"""node.sh's reclaim of the bridge a dead node left (a test run killed before `node.sh stop`), run as root in
network and PID namespaces of their own: the machine's links and processes are neither seen nor touched."""

import os
import subprocess

NODE_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'node.sh')
# A process whose command line reads like a live node supervisor's (node.sh's own check reads /proc/PID/cmdline).
FAKE_SUPERVISOR = '(exec -a "node.sh _supervise" sleep 60) & sleep 0.2\n'


def reclaim(alias, supervisor=False, bridge=True, tmp_path='/tmp'):
    """node.sh's reclaim_dead_bridge on a fresh bridge gfmn-cni0 with ``alias``: (exit status, output, bridge kept)."""
    script = 'set -e\n'
    if bridge:
        script += 'ip link add gfmn-cni0 type bridge\n'
        if alias:
            script += 'ip link set dev gfmn-cni0 alias %s\n' % alias
    if supervisor:
        script += FAKE_SUPERVISOR
    script += ('(GPUFLEET_CLUSTER_STATE_DIR=%s; . %s; reclaim_dead_bridge) && status=0 || status=$?\n'
               'ip link show dev gfmn-cni0 >/dev/null 2>&1 && echo BRIDGE-KEPT\n'
               'exit $status\n' % (tmp_path, NODE_SH))
    done = subprocess.run(['unshare', '--net', '--pid', '--fork', '--mount-proc', 'bash', '-c', script],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60, check=False)
    return done.returncode, done.stdout, 'BRIDGE-KEPT' in done.stdout


def test_a_bridge_of_a_node_that_no_longer_runs_is_deleted(tmp_path):
    status, output, kept = reclaim('gpufleet-mig-node-0123abcd', tmp_path=tmp_path)
    assert (status, kept) == (0, False), output
    assert 'deleted bridge gfmn-cni0, left by node gpufleet-mig-node-0123abcd, which no longer runs' in output


def test_a_bridge_is_kept_while_a_node_supervisor_runs(tmp_path):
    status, output, kept = reclaim('gpufleet-mig-node-0123abcd', supervisor=True, tmp_path=tmp_path)
    assert (status, kept) == (1, True), output
    assert 'refusing to touch it' in output


def test_a_link_node_sh_did_not_make_is_kept(tmp_path):
    for alias in ('someone-else', None):
        status, output, kept = reclaim(alias, tmp_path=tmp_path)
        assert (status, kept) == (1, True), output
        assert 'refusing to touch it' in output


def test_no_bridge_nothing_to_do(tmp_path):
    status, output, kept = reclaim(None, bridge=False, tmp_path=tmp_path)
    assert (status, kept) == (0, False), output

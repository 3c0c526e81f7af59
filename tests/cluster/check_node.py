# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""End-to-end check of the real test node: cluster.sh + node.sh + device_plugin.py on a simulated
A100-SXM4-80GB host, read back through plugins/module_utils/k8s/_pod_resources.py.

  sudo .venv/bin/python tests/cluster/check_node.py      (root; the Python needs grpcio and nvidia-ml-py)

1. builds (or finds) the binaries, starts the control plane and the node, and the device plugin on
   a host with seven 1g.10gb MIG devices: the node's allocatable shows nvidia.com/mig-1g.10gb: 7;
2. runs a busybox pod asking for one, until Running; the kubelet's pod-resources List names the
   pod with one MIG UUID that the simulated NVML reports, the container got it as
   NVIDIA_VISIBLE_DEVICES, and pods_of_pids maps the container's pid to the pod's UID;
3. restarts the kubelet: the plugin registers again, the pod keeps running and List still names it;
4. pauses the plugin with the node label, rewrites the host to two 3g.40gb, restores the label:
   the node's allocatable becomes nvidia.com/mig-3g.40gb: 2 (mig-1g.10gb 0 or gone), the pod untouched;
   SIGHUP after another rewrite (one 7g.80gb) re-enumerates;
5. stops everything and checks nothing is left: no node process, cgroup, network namespace, mount,
   bridge or link, and every kernel setting as before.

Prints timings and the memory of the node's processes, then "N passed, N failed".

Environment: GPUFLEET_CLUSTER_STATE_DIR (default <repo>/.state/node-check), and what cluster.sh
and node.sh read.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import device_plugin  # noqa: E402  (after the path: it lives beside this file)

pod_resources = device_plugin.pod_resources
NODE = os.environ.get('GPUFLEET_NODE_NAME', 'gpu-node')
DEPLOY_LABEL = device_plugin.DEPLOY_LABEL
PAUSED = 'paused-for-mig-change'
MIG_1G = 'nvidia.com/mig-1g.10gb'
MIG_3G = 'nvidia.com/mig-3g.40gb'
MIG_7G = 'nvidia.com/mig-7g.80gb'
NODE_PROCESS_NAMES = ('kubelet', 'containerd', 'containerd-shim-runc-v2', 'pause', 'sleep')
# /proc/sys entries that move on their own.
VOLATILE_SYSCTLS = re.compile(
    r'^(kernel/random/|kernel/ns_last_pid|kernel/pty/nr|kernel/tainted|fs/dentry-state|fs/inode-nr|fs/inode-state|'
    r'fs/file-nr|fs/aio-nr|fs/quota/|net/netfilter/nf_conntrack_count|vm/stat_refresh|kernel/sched_domain/|'
    r'net/ipv4/tcp_mem|net/ipv4/udp_mem|fs/binfmt_misc/|fs/fscache/|kernel/keys/gc_delay|net/core/netdev_rss_key|'
    r'dev/cdrom/|fs/nfs/|sunrpc/|kernel/perf_event_max|debug/|'
    # Per-interface settings come and go with other people's interfaces; ours are checked as links.
    r'net/ipv[46]/(conf|neigh)/(?!all/|default/))')

results = []
timings = []


def say(message):
    print('[check] %s' % message, flush=True)


def check(what, ok, detail=''):
    results.append((what, bool(ok)))
    say('%s: %s%s' % ('PASS' if ok else 'FAIL', what, (' (%s)' % detail) if detail and not ok else ''))
    return ok


def run(argv, env=None, check_rc=True, capture=True):
    merged = dict(os.environ)
    merged.update(env or {})
    done = subprocess.run(argv, env=merged, check=False, stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.STDOUT if capture else None, universal_newlines=True)
    if check_rc and done.returncode != 0:
        raise SystemExit('%s failed (%d):\n%s' % (' '.join(argv), done.returncode, done.stdout or ''))
    return done


def timed(label, function, *args, **kwargs):
    started = time.monotonic()
    value = function(*args, **kwargs)
    timings.append((label, time.monotonic() - started))
    say('%s took %.1fs' % (label, timings[-1][1]))
    return value


def wait_until(what, predicate, timeout=60.0, interval=0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise SystemExit('timed out after %ss waiting for %s' % (timeout, what))
        time.sleep(interval)


# ---- the machine, before and after --------------------------------------------------------------

def sysctls():
    values = {}
    for directory, dummy, files in os.walk('/proc/sys'):
        for name in files:
            path = os.path.join(directory, name)
            key = path[len('/proc/sys/'):]
            if VOLATILE_SYSCTLS.match(key):
                continue
            try:
                with open(path) as handle:
                    values[key] = handle.read()
            except (IOError, OSError):
                continue
    return values


def net_namespaces():
    found = set()
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                found.add(os.readlink('/proc/%s/ns/net' % entry))
            except OSError:
                pass
    return found


def mount_targets():
    with open('/proc/self/mountinfo') as handle:
        return sorted(line.split()[4] for line in handle)


def links():
    return sorted(line.split(':')[1].strip().split('@')[0]
                  for line in run(['ip', '-o', 'link', 'show']).stdout.splitlines())


def cgroup_roots():
    roots = []
    for mount in run(['findmnt', '-rn', '-t', 'cgroup,cgroup2', '-o', 'TARGET']).stdout.split():
        roots.extend(os.path.join(mount, d) for d in os.listdir(mount) if d.startswith('gpufleet-mig-node-'))
    return roots


def processes(pattern):
    """{pid: command line} of the processes whose command line contains ``pattern``."""
    found = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open('/proc/%s/cmdline' % entry, 'rb') as handle:
                cmdline = handle.read().replace(b'\0', b' ').decode('utf-8', 'replace').strip()
        except (IOError, OSError):
            continue
        if cmdline and pattern in cmdline:
            found[int(entry)] = cmdline
    return found


def rss_kib(pid):
    try:
        with open('/proc/%d/status' % pid) as handle:
            for line in handle:
                if line.startswith('VmRSS:'):
                    return int(line.split()[1])
    except (IOError, OSError):
        pass
    return 0


def namespace_users(namespace_id, kind):
    """Pids of the processes in the namespace ``namespace_id`` (e.g. 'mnt:[4026532301]')."""
    users = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                if os.readlink('/proc/%s/ns/%s' % (entry, kind)) == namespace_id:
                    users.append(int(entry))
            except OSError:
                pass
    return users


def ours(names, state):
    """What in a list of mount targets or link names could be the node's."""
    return sorted(n for n in names if n.startswith(state + '/') or n.startswith('gfmn') or n.startswith('veth')
                  or n.startswith(('/run/containerd', '/var/lib/kubelet', '/var/lib/cni', '/run/netns')))


def machine_snapshot():
    return {'sysctls': sysctls(), 'netns': net_namespaces(), 'mounts': mount_targets(), 'links': links(),
            'paths': {p: os.path.exists(p) for p in ('/run/containerd', '/var/lib/kubelet', '/var/lib/cni', '/run/netns')}}


# ---- the cluster ---------------------------------------------------------------------------------

class Cluster(object):
    def __init__(self, state):
        self.state = state
        self.env = {'GPUFLEET_CLUSTER_STATE_DIR': state, 'GPUFLEET_CLUSTER_PYTHON': sys.executable,
                    'GPUFLEET_NODE_NAME': NODE}

    def script(self, name, *args, **kwargs):
        env = dict(self.env)
        env.update(kwargs.get('env', {}))
        return run([os.path.join(HERE, name)] + list(args), env=env, check_rc=kwargs.get('check_rc', True))

    @property
    def facts(self):
        with open(os.path.join(self.state, 'cluster.json')) as handle:
            return json.load(handle)

    @property
    def node_facts(self):
        with open(os.path.join(self.state, 'node.json')) as handle:
            return json.load(handle)

    def kubectl(self, *args, **kwargs):
        argv = [self.facts['kubectl'], '--kubeconfig', self.facts['kubeconfig'], '--request-timeout', '20s'] + list(args)
        done = subprocess.run(argv, input=kwargs.get('stdin'), check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True)
        if done.returncode != 0:
            raise SystemExit('kubectl %s failed: %s' % (' '.join(args), done.stderr))
        return done.stdout

    def get(self, *args):
        return json.loads(self.kubectl('get', '-o', 'json', *args))

    def allocatable(self):
        return self.get('node', NODE)['status'].get('allocatable', {})

    def label(self, value):
        self.kubectl('label', 'node', NODE, '%s=%s' % (DEPLOY_LABEL, value), '--overwrite')

    def plugin_status(self):
        try:
            with open(self.node_facts['device_plugin']['status_file']) as handle:
                return json.load(handle)
        except (IOError, OSError, ValueError):
            return {}


def write_host(path, gpu_instances):
    """The simulated A100-SXM4-80GB, MIG enabled, each GPU instance with its full-size compute instance."""
    instances = [{'profile': profile, 'start': start, 'compute_instances': [{'profile': profile}]}
                 for profile, start in gpu_instances]
    state = {'gpus': [{'model': 'A100-SXM4-80GB', 'uuid': 'GPU-0b8f2c1e-5d4a-4f3b-9e2d-7c6a5b4e3d2f',
                       'mig': {'current': 'enabled'}, 'gpu_instances': instances}]}
    with open(path + '.tmp', 'w') as handle:
        json.dump(state, handle, indent=1)
    os.replace(path + '.tmp', path)


POD = {
    'apiVersion': 'v1', 'kind': 'Pod',
    'metadata': {'name': 'mig-sleeper', 'namespace': 'default'},
    'spec': {
        # Pinned: the fake GPU nodes of nodes.json advertise MIG devices too, and run nothing.
        'nodeSelector': {'kubernetes.io/hostname': NODE},
        'terminationGracePeriodSeconds': 2,
        'containers': [{
            'name': 'work', 'image': 'gpufleet.invalid/busybox:local', 'imagePullPolicy': 'Never',
            'command': ['sh', '-c', 'echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"; exec sleep 3600'],
            'resources': {'limits': {MIG_1G: 1}},
        }],
    },
}


def pod_state(cluster):
    pod = cluster.get('pod', '-n', 'default', 'mig-sleeper')
    statuses = pod['status'].get('containerStatuses', [{}])
    return {'uid': pod['metadata']['uid'], 'phase': pod['status'].get('phase'),
            'restarts': statuses[0].get('restartCount'), 'container_id': statuses[0].get('containerID', ''),
            'running': 'running' in statuses[0].get('state', {})}


def container_pid(cluster, container_id):
    listing = run(cluster.node_facts['ctr'] + ['tasks', 'ls']).stdout.splitlines()
    for line in listing[1:]:
        fields = line.split()
        if fields and fields[0] == container_id:
            return int(fields[1])
    raise SystemExit('container %s not in ctr tasks ls:\n%s' % (container_id, '\n'.join(listing)))


def scenario(cluster, host_file):
    socket_path = cluster.node_facts['pod_resources_socket']

    # -- 1. plugin on 7x 1g.10gb
    write_host(host_file, [('1g.10gb', start) for start in range(7)])
    nvml = device_plugin.enumerate_resources(host_file)
    check('the simulated NVML reports seven 1g.10gb MIG devices', len(nvml.get(MIG_1G, [])) == 7, nvml)
    timed('device plugin start', cluster.script, 'node.sh', 'plugin-start', env={device_plugin.SIMULATOR_ENV: host_file})
    allocatable = timed('mig-1g.10gb in the node allocatable', wait_until, 'mig-1g.10gb: 7 on the node',
                        lambda: cluster.allocatable().get(MIG_1G) == '7' and cluster.allocatable())
    check('node allocatable nvidia.com/mig-1g.10gb: 7', allocatable.get(MIG_1G) == '7', allocatable)
    check('GetAllocatableResources lists the seven MIG UUIDs',
          sorted(pod_resources.allocatable_devices(socket_path).get(MIG_1G, [])) == sorted(nvml[MIG_1G]))

    # -- 2. a pod with one MIG device
    def start_pod():
        cluster.kubectl('apply', '-f', '-', stdin=json.dumps(POD))
        return wait_until('the pod to run', lambda: pod_state(cluster)['running'] and pod_state(cluster), timeout=120)

    pod = timed('pod start to Running', start_pod)
    devices = pod_resources.list_pod_devices(socket_path)
    mine = [d for d in devices if d['pod'] == 'mig-sleeper']
    check('pod-resources List names the pod with one mig-1g.10gb device',
          len(mine) == 1 and mine[0]['namespace'] == 'default' and mine[0]['container'] == 'work'
          and mine[0]['resource'] == MIG_1G and len(mine[0]['device_ids']) == 1, devices)
    device_id = mine[0]['device_ids'][0] if mine else None
    check('the device is a MIG UUID the simulated NVML reports', device_id in nvml[MIG_1G], device_id)
    logs = cluster.kubectl('logs', '-n', 'default', 'mig-sleeper')
    check('the container got NVIDIA_VISIBLE_DEVICES=<that UUID> (kubectl logs through the kubelet on 127.0.0.1)',
          logs.strip() == 'NVIDIA_VISIBLE_DEVICES=%s' % device_id, logs)
    container_id = pod['container_id'].split('://', 1)[-1]
    pid = container_pid(cluster, container_id)
    mapped = device_plugin.pod_cgroups.pods_of_pids([pid, os.getpid()])
    check('pods_of_pids maps the container pid to the pod UID and container',
          mapped == {pid: {'pod_uid': pod['uid'], 'container_id': container_id, 'qos': 'besteffort'}}, mapped)

    # -- 3. kubelet restart: the plugin registers again, the pod stays
    registrations = cluster.plugin_status().get('registrations')
    timed('kubelet restart to Ready', cluster.script, 'node.sh', 'restart-kubelet')
    wait_until('the plugin to register again', lambda: cluster.plugin_status().get('registrations', 0) > registrations)
    wait_until('GetAllocatableResources to list the seven devices again',
               lambda: sorted(pod_resources.allocatable_devices(socket_path).get(MIG_1G, [])) == sorted(nvml[MIG_1G]))
    after = pod_state(cluster)
    check('after a kubelet restart the plugin re-registered and the pod runs on, unrestarted',
          after['uid'] == pod['uid'] and after['restarts'] == 0 and after['running'], after)
    # A new kubelet answers List before it knows its pods again (its informer must sync first).
    listed = timed('List naming the pod again after the restart', wait_until, 'List to name the pod again', lambda: [
        d['device_ids'] for d in pod_resources.list_pod_devices(socket_path) if d['pod'] == 'mig-sleeper'], 30, 0.1)
    check('after a kubelet restart List names the pod and its device again', listed == [[device_id]], listed)

    # -- 4. paused by the label, re-laid out, resumed
    def pause():
        cluster.label(PAUSED)
        wait_until('the plugin to pause', lambda: cluster.plugin_status().get('state') == 'paused')
        return wait_until('mig-1g.10gb: 0 on the node', lambda: cluster.allocatable().get(MIG_1G) == '0')

    timed('pause to allocatable 0', pause)
    check('the paused plugin removed its sockets',
          sorted(os.listdir(cluster.node_facts['device_plugin_dir'])) == ['kubelet.sock', 'kubelet_internal_checkpoint'],
          os.listdir(cluster.node_facts['device_plugin_dir']))
    write_host(host_file, [('3g.40gb', 0), ('3g.40gb', 4)])

    def resume():
        cluster.label('true')
        return wait_until('mig-3g.40gb: 2 on the node', lambda: cluster.allocatable().get(MIG_3G) == '2' and cluster.allocatable())

    allocatable = timed('label restored to mig-3g.40gb: 2', resume)
    check('node allocatable nvidia.com/mig-3g.40gb: 2, mig-1g.10gb 0 or gone',
          allocatable.get(MIG_3G) == '2' and allocatable.get(MIG_1G, '0') == '0', allocatable)
    after = pod_state(cluster)
    check('the running pod is untouched (same UID, restartCount 0, Running)',
          after['uid'] == pod['uid'] and after['restarts'] == 0 and after['phase'] == 'Running' and after['running'], after)
    check('List still names the pod with its 1g.10gb device',
          [d['device_ids'] for d in pod_resources.list_pod_devices(socket_path) if d['pod'] == 'mig-sleeper']
          == [[device_id]])
    check('the plugin enumerated twice and serves the two 3g.40gb UUIDs',
          cluster.plugin_status().get('enumerations') == 2
          and cluster.plugin_status().get('resources') == device_plugin.enumerate_resources(host_file))

    write_host(host_file, [('7g.80gb', 0)])
    cluster.script('node.sh', 'plugin-hup')
    allocatable = wait_until('mig-7g.80gb: 1 after SIGHUP', lambda: cluster.allocatable().get(MIG_7G) == '1' and cluster.allocatable())
    check('SIGHUP re-enumerates: nvidia.com/mig-7g.80gb: 1, mig-3g.40gb 0',
          allocatable.get(MIG_7G) == '1' and allocatable.get(MIG_3G) == '0', allocatable)

    # -- memory of the node's processes (and of the control plane, for scale)
    node_dir = cluster.node_facts['node_dir']
    usage = {}
    for pid, cmdline in processes(node_dir + '/').items():
        name = os.path.basename(cmdline.split()[0])
        name = 'device_plugin.py' if 'device_plugin.py' in cmdline else name
        usage[name] = usage.get(name, 0) + rss_kib(pid)
    for pid in pod_resources.pods_of_pids([int(p) for p in os.listdir('/proc') if p.isdigit()]):
        usage['pod processes'] = usage.get('pod processes', 0) + rss_kib(pid)
    for pid, cmdline in processes(cluster.state + '/').items():
        name = os.path.basename(cmdline.split()[0])
        if name in ('etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler'):
            usage[name] = usage.get(name, 0) + rss_kib(pid)
    for name, kib in sorted(usage.items(), key=lambda item: -item[1]):
        say('memory: %-26s %6.0f MiB' % (name, kib / 1024.0))
    node_names = ('kubelet', 'containerd', 'containerd-shim-runc-v2', 'device_plugin.py', 'pod processes')
    say('memory: node total %.0f MiB, with the control plane %.0f MiB'
        % (sum(v for k, v in usage.items() if k in node_names) / 1024.0, sum(usage.values()) / 1024.0))


def main():
    if os.geteuid() != 0:
        raise SystemExit('run as root: the node needs containerd, cgroups and a bridge')
    state = os.path.realpath(os.environ.get('GPUFLEET_CLUSTER_STATE_DIR', os.path.join(REPO, '.state', 'node-check')))
    cluster = Cluster(state)
    before = machine_snapshot()

    build = timed('build.sh', run, [os.path.join(HERE, 'build.sh')])
    say('build: %s' % ('rebuilt' if 'building' in build.stdout else 'binaries were up to date'))
    timed('cluster start', cluster.script, 'cluster.sh', 'start')
    node_dir = os.path.join(state, 'node')
    try:
        timed('node start to Ready', cluster.script, 'node.sh', 'start')
        facts = cluster.node_facts
        check('node.json names the sockets under the kubelet root dir',
              facts['pod_resources_socket'].startswith(facts['kubelet_root_dir'] + '/')
              and facts['device_plugin_dir'].startswith(facts['kubelet_root_dir'] + '/')
              and os.path.exists(facts['pod_resources_socket']) and os.path.exists(facts['kubelet_registration_socket']))
        node = cluster.get('node', NODE)
        check('the node registered with its labels and InternalIP 127.0.0.1',
              node['metadata']['labels'].get(DEPLOY_LABEL) == 'true'
              and node['metadata']['labels'].get('nvidia.com/gpu.present') == 'true'
              and {'type': 'InternalIP', 'address': '127.0.0.1'} in node['status'].get('addresses', []))
        during = sysctls()
        check('the kubelet left the machine kernel settings alone while running',
              all(during.get(k) == before['sysctls'].get(k) for k in
                  ('vm/overcommit_memory', 'vm/panic_on_oom', 'kernel/panic', 'kernel/panic_on_oops',
                   'kernel/keys/root_maxkeys', 'kernel/keys/root_maxbytes')))
        with open(os.path.join(node_dir, 'mntns')) as handle:
            node_mount_namespace = handle.read().strip()
        pods_network_namespaces = set()
        for pid in pod_resources.pods_of_pids([int(p) for p in os.listdir('/proc') if p.isdigit()]):
            try:
                pods_network_namespaces.add(os.readlink('/proc/%d/ns/net' % pid))
            except OSError:
                pass
        scenario(cluster, os.path.join(state, 'simulated-host.json'))
        for pid in pod_resources.pods_of_pids([int(p) for p in os.listdir('/proc') if p.isdigit()]):
            try:
                pods_network_namespaces.add(os.readlink('/proc/%d/ns/net' % pid))
            except OSError:
                pass
    finally:
        timed('node stop', cluster.script, 'node.sh', 'stop', check_rc=False)
        timed('cluster stop', cluster.script, 'cluster.sh', 'stop', check_rc=False)

    after = machine_snapshot()
    check('no node process is left', not processes(node_dir + '/'), processes(node_dir + '/'))
    leftovers = {pid: cmd for pid, cmd in processes('').items()
                 if os.path.basename(cmd.split()[0]) in NODE_PROCESS_NAMES and ('sleep 3600' in cmd or 'sleep' not in cmd)}
    check('no kubelet, containerd, shim, pause or pod process is left', not leftovers, leftovers)
    check('no pod cgroup is left', not cgroup_roots(), cgroup_roots())
    check('the pods had network namespaces of their own', len(pods_network_namespaces - before['netns']) >= 1)
    check("no pod's network namespace is left", not (pods_network_namespaces & after['netns']),
          pods_network_namespaces & after['netns'])
    check("the node's mount namespace is gone (and with it every mount the node made)",
          not namespace_users(node_mount_namespace, 'mnt'), namespace_users(node_mount_namespace, 'mnt'))
    check('no mount of the node is left on the machine', ours(after['mounts'], state) == ours(before['mounts'], state),
          ours(after['mounts'], state))
    check('no bridge or veth of the node is left', ours(after['links'], state) == ours(before['links'], state),
          ours(after['links'], state))
    check('/run/containerd, /var/lib/kubelet, /var/lib/cni, /run/netns as before', after['paths'] == before['paths'],
          after['paths'])
    changed = sorted(k for k in set(before['sysctls']) | set(after['sysctls'])
                     if before['sysctls'].get(k) != after['sysctls'].get(k))
    check('every kernel setting as before', not changed, ', '.join(changed))

    for label, seconds in timings:
        say('time: %-38s %6.1fs' % (label, seconds))
    passed = sum(1 for dummy, ok in results if ok)
    failed = len(results) - passed
    print('%d passed, %d failed' % (passed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())

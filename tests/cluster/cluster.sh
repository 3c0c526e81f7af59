#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# A real Kubernetes control plane on loopback for the cluster tests:
# etcd, kube-apiserver (RBAC + token auth), kube-controller-manager and
# kube-scheduler, plus fake GPU nodes. No kubelet here: node.sh adds a real node
# (containerd + kubelet) to a running cluster; stop stops that node first.
#
#   cluster.sh start          build (cached) and start; writes STATE/env, STATE/kubeconfig,
#                             STATE/cluster.json; fails if STATE already has a running cluster
#   cluster.sh stop           stop everything start started (safe to repeat)
#   cluster.sh status         exit 0 when the cluster in STATE is up and ready
#   cluster.sh run -- CMD...  start, run CMD with STATE/env sourced, always stop
#
# Environment:
#   GPUFLEET_CLUSTER_STATE_DIR  state directory (default <repo>/.state/cluster)
#   GPUFLEET_CLUSTER_NODES      fake node spec, JSON (default tests/cluster/nodes.json)
#   GPUFLEET_CLUSTER_LIFETIME   seconds after which the cluster stops itself (default 7200),
#                               so a test run that dies without `stop` leaks nothing for long
#   GPUFLEET_CLUSTER_START_TIMEOUT  seconds to wait for readiness (default 240)
#   GPUFLEET_CLUSTER_CONTROLLERS    kube-controller-manager --controllers value
#   GPUFLEET_CLUSTER_FEATURE_GATES  kube-apiserver --feature-gates value (default none), e.g.
#                                   DRAPartitionableDevices=true: without it the API server drops
#                                   the sharedCounters of a ResourceSlice (alpha in 1.34)
#   GPUFLEET_CLUSTER_RUNTIME_CONFIG kube-apiserver --runtime-config value (default none), e.g.
#                                   admissionregistration.k8s.io/v1beta1=true: a beta API group version
#                                   new since 1.24 is off by default (pkg/controlplane/instance.go)
#   GPUFLEET_CLUSTER_BIN_DIR, GPUFLEET_CLUSTER_CACHE: see build.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

state=$(realpath -m "${GPUFLEET_CLUSTER_STATE_DIR:-$repo/.state/cluster}")
python=${GPUFLEET_CLUSTER_PYTHON:-python3}
marker=.gpufleet-cluster

# Controllers the tests need. node-lifecycle stays out: it would taint and
# evict the fake nodes, whose kubelets never post a heartbeat. resourceclaim: takes a
# gone pod off its ResourceClaim's reservedFor, without which the claim is never deleted.
default_controllers=resourcequota-controller,daemonset-controller,deployment-controller,replicaset-controller,garbage-collector-controller,namespace-controller,disruption-controller,resourceclaim-controller

supervisor_alive() {
    [[ -f "$state/supervisor.pid" ]] && kill -0 "$(cat "$state/supervisor.pid")" 2>/dev/null
}

api_get() { # PATH: GET with the admin token, verifying the serving cert
    curl -fsS --max-time 5 --cacert "$state/pki/ca.crt" -H "Authorization: Bearer $(cat "$state/admin.token")" \
        "https://127.0.0.1:$(cat "$state/ports/apiserver")$1"
}

# --- supervisor: runs detached (setsid); owns all four processes --------------

supervise() {
    local bin lifetime
    bin=$(cat "$state/bin_dir")
    lifetime=${GPUFLEET_CLUSTER_LIFETIME:-7200}
    # Globals, not locals: the EXIT trap that reads them may run after this
    # function's scope is gone.
    pids=()
    declare -gA names=()
    local p_etcd p_api p_kcm p_sched
    p_etcd=$(cat "$state/ports/etcd") p_api=$(cat "$state/ports/apiserver")
    p_kcm=$(cat "$state/ports/controller-manager") p_sched=$(cat "$state/ports/scheduler")

    # shellcheck disable=SC2317  # invoked through the EXIT trap
    teardown() {
        trap - EXIT TERM INT
        local i pid
        # Reverse start order: clients before the apiserver before etcd.
        for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
            pid=${pids[i]}
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            kill -KILL "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        done
        rm -f "$state/ready"
        log "supervisor: stopped"
    }
    trap teardown EXIT
    trap 'exit 0' TERM INT

    launch() { # NAME CMD...
        local name=$1
        shift
        "$@" >"$state/logs/$name.log" 2>&1 </dev/null &
        pids+=("$!")
        names[$!]=$name
        log "supervisor: started $name (pid $!)"
    }

    launch etcd "$bin/etcd" --name default --data-dir "$state/etcd" \
        --listen-client-urls "http://127.0.0.1:$p_etcd" --advertise-client-urls "http://127.0.0.1:$p_etcd" \
        --listen-peer-urls "http://127.0.0.1:$(cat "$state/ports/etcd-peer")" \
        --initial-advertise-peer-urls "http://127.0.0.1:$(cat "$state/ports/etcd-peer")" \
        --initial-cluster "default=http://127.0.0.1:$(cat "$state/ports/etcd-peer")" \
        --unsafe-no-fsync --log-level warn
    wait_for 60 "etcd" "${pids[0]}" curl -fsS --max-time 2 "http://127.0.0.1:$p_etcd/health" || exit 1

    local -a gates=()
    [[ -z "${GPUFLEET_CLUSTER_FEATURE_GATES:-}" ]] || gates=(--feature-gates "$GPUFLEET_CLUSTER_FEATURE_GATES")
    [[ -z "${GPUFLEET_CLUSTER_RUNTIME_CONFIG:-}" ]] || gates+=(--runtime-config "$GPUFLEET_CLUSTER_RUNTIME_CONFIG")
    # ServiceAccount admission is off (no token controller runs) but the
    # --service-account-* flags stay mandatory. TaintNodesByCondition is off
    # because only node-lifecycle would remove the not-ready taint it adds.
    launch kube-apiserver "$bin/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$p_etcd" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$p_api" \
        --cert-dir "$state/pki" --tls-cert-file "$state/pki/apiserver.crt" --tls-private-key-file "$state/pki/apiserver.key" \
        --service-cluster-ip-range 10.96.0.0/24 \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$state/pki/sa.pub" --service-account-signing-key-file "$state/pki/sa.key" \
        --authorization-mode RBAC --anonymous-auth=false --token-auth-file "$state/tokens.csv" \
        --allow-privileged=true --endpoint-reconciler-type none \
        --disable-admission-plugins ServiceAccount,TaintNodesByCondition \
        --kubelet-preferred-address-types InternalIP \
        --enable-admission-plugins ResourceQuota,Priority \
        --enable-priority-and-fairness=false --profiling=false "${gates[@]}"
    wait_for 120 "kube-apiserver /readyz" "${pids[1]}" api_get /readyz || exit 1

    launch kube-controller-manager "$bin/kube-controller-manager" \
        --kubeconfig "$state/controller-manager.kubeconfig" --leader-elect=false \
        --controllers "${GPUFLEET_CLUSTER_CONTROLLERS:-$default_controllers}" \
        --bind-address 127.0.0.1 --secure-port "$p_kcm" --profiling=false
    launch kube-scheduler "$bin/kube-scheduler" \
        --kubeconfig "$state/scheduler.kubeconfig" --leader-elect=false \
        --bind-address 127.0.0.1 --secure-port "$p_sched" --profiling=false
    # -k only for these two health probes: their serving certs are generated
    # in memory at start and signed by nobody.
    wait_for 60 "kube-controller-manager /healthz" "${pids[2]}" curl -kfsS --max-time 2 "https://127.0.0.1:$p_kcm/healthz" || exit 1
    wait_for 60 "kube-scheduler /healthz" "${pids[3]}" curl -kfsS --max-time 2 "https://127.0.0.1:$p_sched/healthz" || exit 1
    touch "$state/ready"
    log "supervisor: control plane ready"

    local deadline=$((SECONDS + lifetime)) ticker done_pid
    # Any component dying takes the whole cluster down: half a control plane
    # makes tests fail in confusing ways far from the cause. So does the state
    # directory vanishing (a clean-up of .state/): without it nobody could
    # find and stop these processes.
    while :; do
        sleep 5 &
        ticker=$!
        done_pid=""
        wait -n -p done_pid "${pids[@]}" "$ticker" || true
        if [[ "$done_pid" != "$ticker" ]]; then
            kill "$ticker" 2>/dev/null || true
            log "supervisor: ${names[$done_pid]:-process $done_pid} exited, stopping the cluster"
            exit 1
        fi
        if [[ ! -f "$state/$marker" ]]; then
            log "supervisor: state directory $state is gone, stopping the cluster"
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            log "supervisor: lifetime of ${lifetime}s reached, stopping"
            exit 1
        fi
    done
}

# --- start ---------------------------------------------------------------

make_pki() {
    local pki=$state/pki
    mkdir -p "$pki"
    (
        cd "$pki"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3 \
            -keyout ca.key -out ca.crt -subj "/CN=gpufleet-mig-test-ca" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
        printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc" \
            "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
            "extendedKeyUsage=serverAuth" "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid" >apiserver.ext
        openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3 \
            -extfile apiserver.ext -out apiserver.crt 2>/dev/null
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        chmod 600 ./*.key
    )
}

write_kubeconfig() { # FILE USER TOKEN
    local server
    server="https://127.0.0.1:$(cat "$state/ports/apiserver")"
    umask 077
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: gpufleet-test
    cluster:
      server: $server
      certificate-authority: $state/pki/ca.crt
users:
  - name: $2
    user:
      token: $3
contexts:
  - name: gpufleet-test
    context:
      cluster: gpufleet-test
      user: $2
current-context: gpufleet-test
EOF
}

start_once() {
    local -a ports
    read -r -a ports <<<"$("$python" "$here/helper.py" ports 5)"
    mkdir -p "$state/ports"
    local i=0 n
    for n in etcd etcd-peer apiserver controller-manager scheduler; do
        echo "${ports[i]}" >"$state/ports/$n"
        i=$((i + 1))
    done
    write_kubeconfig "$state/kubeconfig" gpufleet-admin "$(cat "$state/admin.token")"
    write_kubeconfig "$state/controller-manager.kubeconfig" system:kube-controller-manager "$(cat "$state/kcm.token")"
    write_kubeconfig "$state/scheduler.kubeconfig" system:kube-scheduler "$(cat "$state/scheduler.token")"

    log "starting supervisor (logs in $state/logs)"
    GPUFLEET_CLUSTER_STATE_DIR=$state setsid "$here/cluster.sh" _supervise >>"$state/logs/supervisor.log" 2>&1 </dev/null &
    echo $! >"$state/supervisor.pid"

    local deadline=$((SECONDS + ${GPUFLEET_CLUSTER_START_TIMEOUT:-240}))
    until [[ -f "$state/ready" ]]; do
        if ! supervisor_alive; then
            log "the control plane failed to start; supervisor log:"
            sed 's/^/    /' "$state/logs/supervisor.log" >&2
            return 1
        fi
        if ((SECONDS >= deadline)); then
            log "timed out waiting for the control plane"
            return 1
        fi
        sleep 0.5
    done
}

show_logs() {
    local f
    for f in "$state"/logs/*.log; do
        [[ -f "$f" ]] || continue
        log "--- last lines of $(basename "$f")"
        tail -n 15 "$f" | sed 's/^/    /' >&2
    done
}

cmd_start() {
    if supervisor_alive; then
        die "a cluster is already running from $state (pid $(cat "$state/supervisor.pid")); run '$0 stop' first"
    fi
    if [[ -e "$state" && ! -f "$state/$marker" && -n "$(ls -A "$state" 2>/dev/null)" ]]; then
        die "$state exists and was not made by cluster.sh; refusing to wipe it"
    fi
    command -v openssl >/dev/null || die "openssl is required"
    command -v curl >/dev/null || die "curl is required"
    local nodes=${GPUFLEET_CLUSTER_NODES:-$here/nodes.json}
    [[ -r "$nodes" ]] || die "node spec $nodes is not readable"

    local bin
    bin=$("$here/build.sh" | tail -n 1)
    # A node of an earlier run (node.sh) lives in STATE/node: stop it before wiping STATE.
    if [[ -f "$state/node/owner" ]]; then
        GPUFLEET_CLUSTER_STATE_DIR=$state "$here/node.sh" stop
    fi
    # From here on anything that fails stops what was started.
    trap cmd_stop EXIT

    rm -rf "$state"
    mkdir -p "$state/logs"
    touch "$state/$marker"
    echo "$bin" >"$state/bin_dir"
    make_pki
    local t_admin t_kcm t_sched t_kubelet
    t_admin=$(openssl rand -hex 24) t_kcm=$(openssl rand -hex 24) t_sched=$(openssl rand -hex 24)
    t_kubelet=$(openssl rand -hex 24)
    (
        umask 077
        # The controller manager runs as system:masters: its per-controller
        # service-account credentials would need the token controller, which
        # this cluster leaves out. The scheduler keeps its bootstrap RBAC role.
        # The kubelet of node.sh too: RBAC alone (no Node authorizer) would leave a
        # system:nodes member without the rights a kubelet needs.
        printf '%s\n' "$t_admin,gpufleet-admin,uid-admin,\"system:masters\"" \
            "$t_kcm,system:kube-controller-manager,uid-kcm,\"system:masters\"" \
            "$t_sched,system:kube-scheduler,uid-sched" \
            "$t_kubelet,gpufleet-kubelet,uid-kubelet,\"system:masters\"" >"$state/tokens.csv"
        echo "$t_admin" >"$state/admin.token"
        echo "$t_kubelet" >"$state/kubelet.token"
        echo "$t_kcm" >"$state/kcm.token"
        echo "$t_sched" >"$state/scheduler.token"
    )

    # Free ports are picked, then bound later by other processes: another
    # program may take one in between. Retry with new ports in that case.
    local attempt ok=""
    for attempt in 1 2 3; do
        if start_once; then ok=1; break; fi
        show_logs
        cmd_stop
        log "start attempt $attempt failed"
        rm -rf "$state/etcd" "$state/ready"
    done
    [[ -n "$ok" ]] || die "could not start the control plane"

    local server
    server="https://127.0.0.1:$(cat "$state/ports/apiserver")"
    # Namespaces and priority classes the apiserver bootstraps itself; the
    # roles under test rely on both existing.
    if ! wait_for 60 "namespace kube-system" "" api_get /api/v1/namespaces/kube-system \
        || ! wait_for 60 "priority class system-node-critical" "" api_get /apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical; then
        show_logs
        die "the API server never bootstrapped its objects"
    fi
    "$python" "$here/helper.py" nodes "$nodes" "$server" "$t_admin" "$state/pki/ca.crt" >"$state/nodes.txt" \
        || die "creating fake nodes failed"

    umask 077
    cat >"$state/env" <<EOF
# Source this file to talk to the test cluster (written by tests/cluster/cluster.sh).
export GPUFLEET_CLUSTER_STATE_DIR=$state
export GPUFLEET_CLUSTER_SERVER=$server
export GPUFLEET_CLUSTER_CA=$state/pki/ca.crt
export GPUFLEET_CLUSTER_TOKEN=$t_admin
export KUBECONFIG=$state/kubeconfig
export K8S_AUTH_KUBECONFIG=$state/kubeconfig
EOF
    cat >"$state/cluster.json" <<EOF
{"server": "$server", "ca_cert": "$state/pki/ca.crt", "token": "$t_admin", "kubeconfig": "$state/kubeconfig", "kubectl": "$bin/kubectl",
 "version": "v$k8s_version", "nodes": [$(sed 's/.*/"&"/' "$state/nodes.txt" | paste -sd,)]}
EOF
    trap - EXIT
    log "Kubernetes v$k8s_version is up at $server with nodes: $(paste -sd' ' "$state/nodes.txt")"
    log "source $state/env"
}

cmd_stop() {
    # The node of node.sh first, while the API server can still take its Node object away.
    if [[ -f "$state/node/owner" ]]; then
        GPUFLEET_CLUSTER_STATE_DIR=$state "$here/node.sh" stop || log "stopping the node of $state failed"
    fi
    if ! [[ -f "$state/supervisor.pid" ]]; then
        log "nothing to stop in $state"
        return 0
    fi
    local pid
    pid=$(cat "$state/supervisor.pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        # The supervisor gives each process 10s to exit before SIGKILL.
        for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        if kill -0 "$pid" 2>/dev/null; then
            log "supervisor $pid did not stop; killing its process group"
            kill -KILL -- "-$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$state/supervisor.pid" "$state/ready"
    log "stopped the cluster in $state"
}

cmd_status() {
    supervisor_alive && [[ -f "$state/ready" ]] && api_get /readyz >/dev/null
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status)
        if cmd_status; then echo "running: $(cat "$state/cluster.json")"; else echo "not running"; exit 1; fi ;;
    run)
        shift
        [[ "${1:-}" == "--" ]] && shift
        [[ $# -gt 0 ]] || die "usage: $0 run -- CMD..."
        cmd_start
        trap cmd_stop EXIT
        # shellcheck disable=SC1091
        . "$state/env"
        "$@"
        ;;
    _supervise) supervise ;;
    *) die "usage: $0 start|stop|status|run -- CMD..." ;;
esac

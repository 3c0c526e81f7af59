# shellcheck shell=bash
# Shared helpers for tests/cluster/*.sh (sourced, not executed); log, die and apt_install come from
# tests/support/lib.sh, the test scripts' shell library.

_cluster_lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034  # the prefix of tests/support/lib.sh's lines
log_tag=cluster
# shellcheck source=../support/lib.sh
. "$_cluster_lib_dir/../support/lib.sh"

# shellcheck disable=SC2034  # used by the scripts that source this file
# The versions come from the wrapper modules only, so go.mod is the single
# place a version bump happens.
k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {sub(/^v/, "", $3); print $3}' \
    "$_cluster_lib_dir/go/kubernetes/go.mod")
etcd_version=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {sub(/^v/, "", $3); print $3}' \
    "$_cluster_lib_dir/go/etcd/go.mod")
[[ -n "$k8s_version" && -n "$etcd_version" ]] || die "cannot read the pinned versions from tests/cluster/go/*/go.mod"
# shellcheck disable=SC2034
k8s_minor=${k8s_version%.*}

cluster_cache_dir() {
    echo "${GPUFLEET_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet-mig/k8s-v${k8s_version}}"
}

# wait_for SECONDS WHAT PID CMD...: poll CMD every 0.25s until it succeeds;
# returns 1 on timeout or as soon as process PID (if not empty) has exited.
wait_for() {
    local limit=$1 what=$2 pid=$3
    shift 3
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
            log "$what: the process exited"
            return 1
        fi
        if ((SECONDS >= deadline)); then
            log "timed out after ${limit}s waiting for $what"
            return 1
        fi
        sleep 0.25
    done
}

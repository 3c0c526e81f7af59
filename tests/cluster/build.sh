#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build (or find) the Kubernetes binaries for tests/cluster: the control plane
# (kube-apiserver, kube-controller-manager, kube-scheduler, etcd), kubectl, and
# the kubelet of the real test node (node.sh).
#
# Prints the directory holding the six binaries on stdout (the last line);
# everything else goes to stderr.
#
# Environment:
#   GPUFLEET_CLUSTER_BIN_DIR  use prebuilt binaries from this directory; nothing is built
#   GPUFLEET_CLUSTER_CACHE    cache directory (default
#                             ${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet-mig/k8s-<version>);
#                             holds bin/, the Go module cache and the Go build cache so a
#                             rebuild after a change to the wrapper modules is incremental
#   GPUFLEET_CLUSTER_GO       the go command (default: go)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet etcd)

check_bins() {
    local dir=$1 b
    for b in "${binaries[@]}"; do
        [[ -x "$dir/$b" ]] || die "$dir/$b is missing or not executable"
    done
    # A prebuilt or stale binary of another minor would make the tests prove
    # something about a version the collection does not target.
    local got
    for b in kube-apiserver kubelet; do
        got=$("$dir/$b" --version 2>/dev/null | awk '{print $2}')
        [[ "$got" == "v${k8s_minor}."* ]] \
            || die "$dir/$b reports version '${got:-?}', expected v${k8s_minor}.x"
    done
}

if [[ -n "${GPUFLEET_CLUSTER_BIN_DIR:-}" ]]; then
    check_bins "$GPUFLEET_CLUSTER_BIN_DIR"
    log "using prebuilt binaries from $GPUFLEET_CLUSTER_BIN_DIR"
    echo "$GPUFLEET_CLUSTER_BIN_DIR"
    exit 0
fi

go_cmd=${GPUFLEET_CLUSTER_GO:-go}
command -v "$go_cmd" >/dev/null || die "'$go_cmd' not found: install Go >= 1.24 or set GPUFLEET_CLUSTER_BIN_DIR"

cache=$(cluster_cache_dir)
bin="$cache/bin"
# The stamp is the content of the wrapper modules: editing go.mod/go.sum
# (e.g. a patch-version bump) rebuilds; anything else reuses the binaries.
stamp=$(cat "$here"/go/kubernetes/go.mod "$here"/go/kubernetes/go.sum "$here"/go/kubernetes/tools.go \
             "$here"/go/etcd/go.mod "$here"/go/etcd/go.sum "$here"/go/etcd/main.go | sha256sum | cut -c1-16)

if [[ -f "$bin/.stamp" && "$(cat "$bin/.stamp")" == "$stamp" ]]; then
    check_bins "$bin"
    log "binaries up to date in $bin"
    echo "$bin"
    exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
# Two builds into one cache (parallel make targets) would race on bin/.
flock -w 3600 9 || die "timed out waiting for another build holding $cache/.lock"

export GOTOOLCHAIN=local            # never download a toolchain behind the user's back
export CGO_ENABLED=0                # static binaries, no C toolchain needed
export GOMODCACHE="$cache/gomod"
export GOCACHE="$cache/gocache"
# readonly: the committed go.sum is the whole trust root (sum.golang.org is
# not consulted for modules it lists) and the build never rewrites the repo.
export GOFLAGS="-mod=readonly -buildvcs=false"

ldflags="-s -w"
for kv in "gitVersion=v${k8s_version}" "gitMajor=${k8s_minor%%.*}" "gitMinor=${k8s_minor#*.}" "gitTreeState=clean"; do
    ldflags+=" -X k8s.io/component-base/version.${kv}"
done

tmp="$cache/bin.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"
start=$SECONDS
log "building Kubernetes v${k8s_version} control plane and kubelet into $cache (first build downloads ~800 MB of modules)"
# One go build for the five commands: their shared packages are compiled once.
(cd "$here/go/kubernetes" && "$go_cmd" build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kubelet)
log "building etcd v${etcd_version}"
(cd "$here/go/etcd" && "$go_cmd" build -trimpath -ldflags "-s -w" -o "$tmp/etcd" .)
echo "$stamp" >"$tmp/.stamp"
rm -rf "$bin"
mv "$tmp" "$bin"
check_bins "$bin"
log "built in $((SECONDS - start))s"
echo "$bin"

# shellcheck shell=bash
# Shell helpers of the test scripts (tests/cluster/*.sh through tests/cluster/lib.sh, tests/fleet/fleet.sh):
# sourced, never executed. Sets no shell option: each script keeps its own `set -euo pipefail`.
#
#   log_tag=NAME           set by the script first: the prefix of the lines below ("[NAME] ...")
#   log MESSAGE...         one line on stderr
#   die MESSAGE...         one ERROR line on stderr, then exit 1
#   apt_install PACKAGE... Debian's packages, installed with apt-get (apt-get update only when the install
#                          fails without it) while no service may start; apt-get's output on stderr; dies
#                          when there is no apt-get or the install fails

# Where Debian's invoke-rc.d looks for the policy that keeps services from starting.
policy_rc=/usr/sbin/policy-rc.d

log() { printf '[%s] %s\n' "${log_tag:-tests}" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "${log_tag:-tests}" "$*" >&2; exit 1; }

apt_install() {
    command -v apt-get >/dev/null || die "missing $* and there is no apt-get: install them"
    log "installing $*"
    (
        # No service may start while the packages install (the machine's own sshd or containerd would
        # listen): a policy-rc.d says so, removed again if we put it there.
        if [[ ! -e "$policy_rc" ]]; then
            printf '#!/bin/sh\n# gpufleet.mig tests (%s): no service starts during their package install\nexit 101\n' \
                "${log_tag:-tests}" >"$policy_rc"
            chmod 0755 "$policy_rc"
            trap 'rm -f "$policy_rc"' EXIT
        fi
        export DEBIAN_FRONTEND=noninteractive
        apt=(apt-get install -y -q --no-install-recommends "$@")
        "${apt[@]}" || { apt-get update -q && "${apt[@]}"; }
    ) >&2 || die "could not install $*"
}

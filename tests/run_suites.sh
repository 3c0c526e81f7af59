#!/usr/bin/env bash
# `make test`: run the suites named on the command line in order, with the Go control plane of the
# cluster tests (the longest build) built in the background meanwhile, and print each suite's wall
# time at the end so that drift is visible. Stops at the first failing suite.
set -uo pipefail
cd "$(dirname "$0")/.." || exit

mkdir -p build
build_log=build/cluster-build.log
started=$SECONDS
build_pid=
build_rc=0
if [[ " $* " == *" cluster-"* ]]; then
    # Niced: the suites in the foreground keep priority; the build only needs to be done by cluster-test.
    # Its own process group (setsid), so that stopping it also stops the go build under make and build.sh.
    setsid nice -n 10 make --no-print-directory cluster-build >"$build_log" 2>&1 &
    build_pid=$!
    build_rc=
    trap 'stop_build' EXIT
fi

stop_build() {
    [[ -n "$build_pid" && -z "$build_rc" ]] || return 0
    kill -TERM -- "-$build_pid" 2>/dev/null
    wait "$build_pid" 2>/dev/null
    build_rc=143
}

# A build that already failed is reported at once, not after every other suite has run.
build_failed_early() {
    [[ -n "$build_pid" && -z "$build_rc" ]] || return 1
    kill -0 "$build_pid" 2>/dev/null && return 1
    wait_for_build && return 1
    return 0
}

wait_for_build() {
    [[ -n "$build_rc" ]] && return "$build_rc"
    local waited=$SECONDS
    wait "$build_pid"
    build_rc=$?
    echo "== cluster-build finished (waited $((SECONDS - waited))s for it; log: $build_log)"
    [[ $build_rc -eq 0 ]] || tail -n 40 "$build_log"
    return "$build_rc"
}

report=()
status=0
suites=("$@")
ran=0
for suite in "${suites[@]}"; do
    if { [[ $suite == cluster-* ]] && ! wait_for_build; } || build_failed_early; then
        report+=("$(printf '%-16s %6s  %s' cluster-build - 'FAILED (see build/cluster-build.log)')")
        status=1
        break
    fi
    echo "== make $suite"
    t0=$SECONDS
    make --no-print-directory "$suite"
    rc=$?
    report+=("$(printf '%-16s %5ds  %s' "$suite" $((SECONDS - t0)) "$([[ $rc -eq 0 ]] && echo passed || echo "FAILED (rc=$rc)")")")
    ran=$((ran + 1))
    if [[ $rc -ne 0 ]]; then
        status=$rc
        break
    fi
done
stop_build
trap - EXIT
for suite in "${suites[@]:ran}"; do
    [[ $status -eq 0 ]] || report+=("$(printf '%-16s %6s  %s' "$suite" - 'not run')")
done

echo
echo "== suite times (wall)"
printf '%s\n' "${report[@]}"
printf '%-16s %5ds\n' total $((SECONDS - started))
exit "$status"

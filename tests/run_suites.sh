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
    nice -n 10 make --no-print-directory cluster-build >"$build_log" 2>&1 &
    build_pid=$!
    build_rc=
    trap 'kill "$build_pid" 2>/dev/null' EXIT
fi

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
for suite in "$@"; do
    if [[ $suite == cluster-* ]] && ! wait_for_build; then
        report+=("$(printf '%-16s %6s  %s' cluster-build - 'FAILED (see build/cluster-build.log)')")
        status=1
        break
    fi
    echo "== make $suite"
    t0=$SECONDS
    make --no-print-directory "$suite"
    rc=$?
    report+=("$(printf '%-16s %5ds  %s' "$suite" $((SECONDS - t0)) "$([[ $rc -eq 0 ]] && echo passed || echo "FAILED (rc=$rc)")")")
    if [[ $rc -ne 0 ]]; then
        status=$rc
        break
    fi
done
if [[ -z "$build_rc" ]]; then
    kill "$build_pid" 2>/dev/null
    wait "$build_pid" 2>/dev/null
fi
trap - EXIT

echo
echo "== suite times (wall)"
printf '%s\n' "${report[@]}"
printf '%-16s %5ds\n' total $((SECONDS - started))
exit "$status"

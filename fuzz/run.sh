#!/usr/bin/env bash
# Runs every fuzz target for a time budget each, one after the other, and
# prints what each did. Exits non-zero if any target found a crash, a panic,
# a failed invariant, a timeout or an out-of-memory input (kept under
# fuzz/artifacts/<target>/).
#
#   fuzz/run.sh [SECONDS] [TARGET...]     default: 60 s, every target
#
# Not part of .ci/run: a meaningful run takes minutes per target. Run it by
# hand before a release, or from a scheduled CI job.
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). cargo-fuzz passes nightly
# -Z flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them, so no
# nightly toolchain is needed.
set -uo pipefail

cd "$(dirname "$0")"
budget=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(control_frame udp_header config file_sd sealed_frame iperf3_control)

export RUSTC_BOOTSTRAP=1
cargo fuzz build >/dev/null || { echo "cargo fuzz build failed" >&2; exit 2; }

failed=()
for t in "${targets[@]}"; do
    # New inputs go to work/ (ignored by git) so that corpus/ keeps only the
    # reviewed seeds; work/ persists, so later runs start where this one ended.
    mkdir -p "work/$t"
    log="work/$t.log"
    echo "== $t: ${budget}s"
    # One process, no -jobs: the fuzzer shares the machine with builds and
    # tests. -timeout catches inputs that hang a parser, not just crashes.
    cargo fuzz run "$t" "work/$t" "corpus/$t" -- \
        -max_total_time="$budget" -timeout=10 -print_final_stats=1 \
        >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
    corpus=$(find "work/$t" -type f | wc -l)
    echo "   executions ${runs:-?}, ${rate:-?} exec/s, corpus $corpus files, peak RSS ${rss:-?} MB"
    if [ $rc -ne 0 ]; then
        echo "   FINDING (exit $rc); log: fuzz/$log"
        grep -E '^(==[0-9]+==|thread .* panicked|SUMMARY|artifact_prefix|Test unit written)' "$log" | head -n 20 | sed 's/^/   /'
        failed+=("$t")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "findings in: ${failed[*]}"
    exit 1
fi
echo "no findings"

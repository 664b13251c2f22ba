#!/usr/bin/env bash
# Bounded fuzz smoke: runs every cargo-fuzz target (`cargo fuzz list`: the
# safetensors header and file, comfy_quant, quant metadata, the planner and
# llama_config) for FUZZ_SECONDS (default 20) from the in-repo seeds, then the
# CLI's argument-vector proptest with ARGS_CASES (default 5000) cases, and exits non-zero if any target crashes,
# panics, leaks or times out. New inputs go to a scratch copy, so the seeds
# under fuzz/corpus/ stay as committed. A crash input is kept under
# fuzz/artifacts/<target>/ (replay: `cargo fuzz run <target> <file>`).
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and libFuzzer's nightly
# flags; on the stable toolchain RUSTC_BOOTSTRAP=1 unlocks them.
# FUZZ_SANITIZER (default address) picks the sanitizer; CI uses `none`
# (coverage-guided still, a much quicker build: panics and hangs only).
# FUZZ_BUILD (default -O, optimized) is cargo fuzz's build mode; CI uses
# --dev (unoptimized, debug assertions on: a minute quicker to build, fewer
# executions in its 10 s, which a smoke test can spare).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-20}"
sanitizer="${FUZZ_SANITIZER:-address}"
build="${FUZZ_BUILD:--O}"
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2
    exit 2
fi
targets=$(cargo fuzz list)
cargo fuzz build "$build" -s "$sanitizer"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in $targets; do
    mkdir -p "$scratch/$t" "corpus/$t"
    echo "=== fuzz $t (${seconds} s) ==="
    # -rss_limit_mb: a header must not make the parser allocate gigabytes.
    status=0
    cargo fuzz run "$build" -s "$sanitizer" "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        >"$scratch/$t.log" 2>&1 || status=$?
    grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^#[0-9]+ +DONE|ERROR|panicked|SUMMARY|Test unit written" \
        "$scratch/$t.log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$scratch/$t.log" >&2
        failed+=("$t")
    fi
done
echo "=== proptest: CLI argument vectors (${ARGS_CASES:-5000} cases) ==="
# In the main workspace, without the fuzz build's RUSTC_BOOTSTRAP (cargo
# would rebuild everything for it), selecting the whole workspace as the
# test stage did (`-p` would unify features differently and rebuild wgpu
# and every crate above it).
(cd .. && env -u RUSTC_BOOTSTRAP PROPTEST_CASES="${ARGS_CASES:-5000}" \
    cargo test -q --workspace --bin dynvram args_proptest) || failed+=("cli-args-proptest")
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz smoke FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz smoke passed: $(echo $targets | wc -w) targets × ${seconds} s"

#!/usr/bin/env bash
# Prefill (flash) attention per flash tuning (`dynvram bench attention
# --queries`: rows x keys per block, subgroups, key/column groups, staging
# serial/paired/global, register prefetch; see `FlashTuning`), f16, on the
# GPU machine (with .dev, .gl):
#   OUT=$OUT bash bench/flash_sweep.sh   # $OUT/flash_sweep.txt (one table per case)
# Cases: a FLUX.1 step's joint attention at 1024² (4608 tokens, 24 heads,
# head_dim 128, no mask), a Llama-7B prefill (512 tokens, 32 heads, causal)
# and a Llama-3-8B-shaped one (2048 tokens, 32 heads over 8 kv heads,
# causal). Each tuning's output is compared with the adapter default's
# (max_diff: f16 rounding, ~1e-3; a broken variant shows NaN or ~1).
# Settings: TUNINGS (comma list; default: the CLI's), REPS (5), OUT (bench-out).
set -uo pipefail
cd "$(dirname "$0")/.."
d=${DYNVRAM:-.dev/dynvram}
out=${OUT:-bench-out}
mkdir -p "$out"
source bench/gpu_env.sh
tunings=()
[ -n "${TUNINGS:-}" ] && tunings=(--flash "$TUNINGS")
reps=${REPS:-5}
table="$out/flash_sweep.txt"
: > "$table"
for case in \
    "--queries 4608 --keys 4608 --heads 24 --head-dim 128 --no-causal" \
    "--queries 512 --keys 512 --heads 32 --head-dim 128" \
    "--queries 2048 --keys 2048 --heads 32 --kv-heads 8 --head-dim 128"; do
  echo "=== bench attention $case ===" | tee -a "$table"
  # shellcheck disable=SC2086 # the case is a list of flags
  timeout 300 "$d" bench attention --backend vulkan $case "${tunings[@]}" --reps "$reps" 2>&1 | tee -a "$table"
done

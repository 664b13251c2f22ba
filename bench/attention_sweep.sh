#!/usr/bin/env bash
# Decode attention per decode tuning (workgroup size x split target or
# forced splits, key groups merged per round; see `dynvram bench attention
# --help`) at Llama-7B's and Llama-3-8B's heads, f16 with RoPE fused, on the
# GPU machine (with .dev, .gl):
#   bash bench/attention_sweep.sh   # $OUT/attention.txt (table), $OUT/attention.json
# Settings: KEYS, KV_HEADS, TUNINGS, REPS, OUT (bench-out).
set -uo pipefail
cd "$(dirname "$0")/.."
d=${DYNVRAM:-.dev/dynvram}
out=${OUT:-bench-out}
mkdir -p "$out"
source bench/gpu_env.sh
# The runtime's default first (and with all heads of a kv head in one
# workgroup, h8), then other workgroup sizes under the policy
# (fewer splits), then one split per kv head (no combine launch), merged one
# key group at a time, 8 at once (fits 4 queries per kv head), or all at
# once (1 query per kv head; skipped where the workgroup memory is short).
tunings=${TUNINGS:-256x132m4,256x132m4h8,128x264,256x132,512x64,512x32,1024x32,128s1,256s1,512s1,1024s1,256s1m8,512s1m8,1024s1m8,512s1m16,1024s1m32,512x32m8,1024x32m8,128x264m4}
args=(bench attention --backend vulkan --keys "${KEYS:-128,512,2048,8192}" --heads 32
    --kv-heads "${KV_HEADS:-32,8}" --head-dim 128 --tunings "$tunings" --reps "${REPS:-50}")
"$d" "${args[@]}" 2>&1 | tee "$out/attention.txt"
"$d" --json "${args[@]}" > "$out/attention.json"

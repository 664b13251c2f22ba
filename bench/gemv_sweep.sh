#!/usr/bin/env bash
# The M = 1 GEMV's shape (rows per workgroup × invocations) against the
# decode layers' weight shapes, one weight per launch and fused (q/k/v
# stacked, gate/up with SwiGLU), on the GPU machine (with .dev, .gl):
#   bash bench/gemv_sweep.sh     # one line per case in $OUT/gemv_sweep.txt
# Settings: SHAPES, FORMATS, ROWS, WGS, FUSE, OUT (bench-out).
set -uo pipefail
cd "$(dirname "$0")/.."
d=${DYNVRAM:-.dev/dynvram}
out=${OUT:-bench-out}
mkdir -p "$out"
source bench/gpu_env.sh
shapes=${SHAPES:-1x4096x4096,1x11008x4096,1x4096x11008}
formats=${FORMATS:-bf16,w4a4}
for fuse in ${FUSE:-none stack glu}; do
    for r in ${ROWS:-1 2 4 8}; do
        for w in ${WGS:-128 256}; do
            "$d" bench linear --backend vulkan --shapes "$shapes" --formats "$formats" --f16 --reps 50 \
                --copy-size 0 --gemv-rows "$r" --gemv-wgs "$w" --fuse "$fuse" 2>&1 |
                grep -E "^(bf16|w4a4|f16|w8a8)" | sed "s/^/fuse=$fuse rows=$r wgs=$w  /"
        done
    done
done | tee "$out/gemv_sweep.txt"

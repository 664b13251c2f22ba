#!/usr/bin/env bash
# The cooperative-matrix GEMM's workgroup shapes side by side
# (`dynvram bench linear --gemm coop --coop-shapes ...`), bf16 and int4
# weights, f16 activations: the large GEMM of K3 and the linears of a
# 512-token Llama-7B prefill. Writes $OUT/coop_sweep.txt.
#
#   bash bench/coop_sweep.sh      # on the GPU machine, from the checkout root, with .dev, .gl
#
# Settings: DYNVRAM (.dev/dynvram), SHAPES (the M×N×K list), COOP_SHAPES
# (SG_MxSG_NxBKxWMxWN list), FORMATS (bf16,w4a4), REPS (5), OUT (bench-out).
set -uo pipefail
cd "$(dirname "$0")/.."
d=${DYNVRAM:-.dev/dynvram}
out=${OUT:-bench-out}
mkdir -p "$out"
source bench/gpu_env.sh
shapes=${SHAPES:-4096x12288x3072,512x4096x4096,512x11008x4096,512x4096x11008}
coop=${COOP_SHAPES:-4x4x32x2x2,2x4x32x4x2,4x2x32x2x4,2x2x32x4x4,2x4x32x4x4,4x2x32x4x4,2x4x64x4x2,2x2x64x4x4,4x4x32x2x4,1x4x32x4x4,2x2x32x2x4,2x2x32x4x2}
timeout 500 "$d" bench linear --backend vulkan --gemm coop --f16 --formats "${FORMATS:-bf16,w4a4}" \
    --shapes "$shapes" --coop-shapes "$coop" --reps "${REPS:-5}" --copy-size 0 2>&1 | tee "$out/coop_sweep.txt"

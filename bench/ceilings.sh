#!/usr/bin/env bash
# Issue 30 item 1: the real ceilings of the matrix units on the lent GPU, in
# one device call, beside our own kernels at Flux's shapes; one table.
#
#   bash bench/prepare.sh && rm -f .dev/e2e_tests     # here (carry <= 64 MiB)
#   mkdir -p .peer && cp /work/shared/peer/* .peer/   # the peer kit (bench/README.md, Peer)
#   # then `run` with carry [".dev", ".gl", ".peer"]:
#   OUT=$OUT bash bench/ceilings.sh                   # ~9 min; $OUT/ceilings/table.md
#
# Steps (run in the order STEPS names them), each under its own timeout,
# all capped by DEADLINE (570 s):
# tbo      llama.cpp's `test-backend-ops perf -b Vulkan0` for MUL_MAT (f16,
#          bf16, q4_0, q8_0 weights at its m = 4096, k = 14336 cases, n = 1,
#          8 and 512) and FLASH_ATTN_EXT (its head-dim-128 cases), each with
#          NV_coopmat2 (the driver's default) and with
#          GGML_VK_DISABLE_COOPMAT2=1 (KHR cooperative matrices, coopmat1: the
#          extension our WGSL reaches).          -> tbo-{mul_mat,fa}-{cm2,cm1}.txt
# coop     `dynvram bench coop`: the matrix units through WGSL with the
#          operands in registers, from workgroup memory with 128-byte rows,
#          with padded rows, padded and double-buffered.     -> coop.json
# linear   `dynvram bench linear` at FLUX.1's shapes, M = 4608 tokens:
#          K = 3072 -> N = 9216, 12288, 21504 and back (N = 3072 from K =
#          3072, 12288, 15360, and 9216 and 21504 as the reverse of the first
#          two), bf16 and w4a4 (int4) weights with f16 activations, with the
#          single-stage cooperative GEMM (the default) and the
#          double-buffered one (DYNVRAM_COOP_GEMM=double).
#                                                -> linear-{single,double}.json
# flash    `dynvram bench attention` at FLUX.1's joint attention (24 heads x
#          4608 tokens x 128, no mask): the device's default kernel, then
#          FLASH (paired + prefetch, and the double-staged `d` tunings that
#          fit 48 KiB at head_dim 128).                    -> attention.json
# bench    llama.cpp `llama-bench -p 512,4096 -n 0 -fa 0,1` on the peer kit's
#          Llama-2-7B-shaped GGUF files (F16 and Q4_0, LAYERS layers: 8 by
#          default, as the GEMM rates do not depend on the layer count), with
#          and without NV_coopmat2.            -> llama-bench-{cm2,cm1}.json
# Then bench/ceilings_table.py writes $OUT/ceilings/table.md: TFLOP/s of
# each, with the card's name.
# Settings: OUT (bench-out), DYNVRAM (.dev/dynvram), LAYERS (8), FLASH, STEPS
# ("coop flash linear tbo bench", in that order), DEADLINE (570), PEER_BIN
# (/tmp/peer-llama-vulkan), MODEL_DIR (/tmp).
set -uo pipefail
cd "$(dirname "$0")/.."
d=${DYNVRAM:-.dev/dynvram}
o=${OUT:-bench-out}/ceilings
mkdir -p "$o"
source bench/gpu_env.sh
bin=${PEER_BIN:-/tmp/peer-llama-vulkan}
models=${MODEL_DIR:-/tmp}
layers=${LAYERS:-8}
t0=$(date +%s)
deadline=${DEADLINE:-570}
# step SECONDS CMD...: CMD under a timeout of at most what is left.
step() {
    local want=$1 left=$((deadline - ($(date +%s) - t0)))
    shift
    [ "$left" -lt 15 ] && { echo "skipped (no time left): $*" >&2; return 1; }
    echo "[$(($(date +%s) - t0)) s] $*" >&2
    timeout $((want < left ? want : left)) "$@"
}
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv 2>&1
    git log -1 --format='commit %h %s' 2>/dev/null
} > "$o/env.txt"
# The peer's binaries, unpacked once (`.peer/run.sh` unpacks to the same place).
peer() {
    [ -x "$bin/test-backend-ops" ] && return 0
    [ -f .peer/llama-vulkan-bin.tar.xz ] || { echo "no .peer/llama-vulkan-bin.tar.xz (carry .peer)" >&2; return 1; }
    mkdir -p "$bin" && tar -xJf .peer/llama-vulkan-bin.tar.xz -C "$bin"
}
# The two llama.cpp modes: NV_coopmat2 where the driver has it, and KHR
# cooperative matrices only.
modes=(cm2 cm1)
# (ggml-vulkan tests whether the variable is set at all: unset it for cm2.)
mode_env() { [ "$1" = cm1 ] && echo GGML_VK_DISABLE_COOPMAT2=1 || echo -u GGML_VK_DISABLE_COOPMAT2; }

s_tbo() {
    peer || return
    local sb=""
    command -v stdbuf > /dev/null && sb="stdbuf -oL -eL"
    for mode in "${modes[@]}"; do
        # shellcheck disable=SC2046,SC2086 # the mode's variable, stdbuf's flags
        step 75 env $(mode_env "$mode") GGML_VK_VISIBLE_DEVICES=0 $sb "$bin/test-backend-ops" perf -o MUL_MAT -b Vulkan0 \
            -p '^type_a=(f16|bf16|q4_0|q8_0),type_b=f32,m=4096,n=(1|8|512),k=14336,' > "$o/tbo-mul_mat-$mode.txt" 2>&1
        # shellcheck disable=SC2046,SC2086
        step 60 env $(mode_env "$mode") GGML_VK_VISIBLE_DEVICES=0 $sb "$bin/test-backend-ops" perf -o FLASH_ATTN_EXT -b Vulkan0 \
            -p 'hsk=128' > "$o/tbo-fa-$mode.txt" 2>&1
        grep -hE "coopmat|matrix cores" "$o/tbo-mul_mat-$mode.txt" | head -2
    done
}
s_coop() {
    step 60 "$d" --json bench coop --backend vulkan > "$o/coop.json" 2> "$o/coop.err" || tail -3 "$o/coop.err"
}
s_linear() {
    local shapes=4608x9216x3072,4608x12288x3072,4608x21504x3072,4608x3072x3072,4608x3072x12288,4608x3072x15360,4608x3072x9216,4608x3072x21504
    for kernel in single double; do
        DYNVRAM_COOP_GEMM=$kernel step 120 "$d" --json bench linear --backend vulkan --shapes "$shapes" \
            --formats bf16,w4a4 --f16 --gemm coop --reps 10 --copy-size 0 \
            > "$o/linear-$kernel.json" 2> "$o/linear-$kernel.err" || tail -3 "$o/linear-$kernel.err"
    done
}
s_flash() {
    step 120 "$d" --json bench attention --backend vulkan --queries 4608 --keys 4608 --heads 24 --head-dim 128 \
        --no-causal --flash "${FLASH:-128x32w8c2pr,128x16w8c2dr,128x16w8c2drt,64x16w4c2dr}" --reps 5 \
        > "$o/attention.json" 2> "$o/attention.err" || tail -3 "$o/attention.err"
}
s_bench() {
    peer || return
    for t in q4_0 f16; do
        local f=$models/llama7b-L$layers-$t.gguf
        [ -f "$f" ] || step 120 python3 .peer/make_gguf.py "$f" --type "$t" --layers "$layers" > "$o/gguf-$t.txt" 2>&1
    done
    for mode in "${modes[@]}"; do
        for t in f16 q4_0; do
            # shellcheck disable=SC2046
            step 90 env $(mode_env "$mode") GGML_VK_VISIBLE_DEVICES=0 "$bin/llama-bench" -m "$models/llama7b-L$layers-$t.gguf" \
                -ngl 99 -p 512,4096 -n 0 -fa 0,1 -r 3 -o json > "$o/llama-bench-$mode-$t.json" 2> "$o/llama-bench-$mode-$t.err" ||
                tail -3 "$o/llama-bench-$mode-$t.err"
        done
    done
}
for s in ${STEPS:-coop flash linear tbo bench}; do
    case $s in
        tbo | coop | linear | flash | bench) "s_$s" ;;
        *) echo "unknown step '$s' (tbo coop linear flash bench)" >&2 ;;
    esac
done
python3 bench/ceilings_table.py "$o" --layers "$layers" > "$o/table.md" 2> "$o/table.err" || tail -3 "$o/table.err"
cat "$o/table.md"
echo "[$(($(date +%s) - t0)) s] done"

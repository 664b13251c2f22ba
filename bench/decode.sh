#!/usr/bin/env bash
# Issue 15: resident prefill and decode, dynvram beside llama.cpp's Vulkan
# backend on the same GPU in the same run, plus dynvram's --profile of one
# prefill and one decode step.
#
#   bash bench/decode.sh        # on the H200, from the checkout root, with .dev, .gl, .peer
#
# 1. synth (and quantize) a llama-7b-shaped checkpoint (bench/llama_model.sh).
# 2. `dynvram --json generate --profile` resident: bf16 weights with f16 and
#    f32 compute, int4 (convrot_w4a4) with f16 compute; prompt $PROMPT_LEN
#    ids, $NEW_TOKENS new tokens, one warm-up.
# 3. llama.cpp (.peer: the peer kit of bench/README.md, Peer) on
#    GGUF files of the same shapes, F16 and Q4_0, pp$PROMPT_LEN / tg$NEW_TOKENS.
# 4. The table (bench/decode_table.py) and every profile, in $OUT/decode.
#
# Settings: DYNVRAM (.dev/dynvram), LIKE (llama-7b: synth's --like, e.g.
# llama3-8b for GQA; the peer's GGUF files are llama-7b's whatever it is),
# LAYERS (32), PROMPT_LEN (512),
# NEW_TOKENS (64), INT4 (1), INT4_SPREAD (0: 1 also runs int4 with both
# spread quantizations, DYNVRAM_SPREAD_QUANT=gemv as int4-f16-spread and
# =codes as int4-f16-codes), SYNC (0: 1 also runs bf16-f16 and int4 with
# --sync-decode), SPLIT_AB (0: 1 also runs bf16-f16 with
# DYNVRAM_CM2_SPLIT=off as bf16-f16-nosplit), RESIDENT_AB (0: 1 also runs
# bf16-f16 with every bf16 weight converted to f16 every pass instead of
# resident ones once (DYNVRAM_CM2_BF16=f16) as bf16-f16-everypass, with f16
# decoded in integer arithmetic (DYNVRAM_F16_UNPACK=off) as bf16-f16-int,
# then bf16-f16 again as bf16-f16-again), STACK_AB (0: 1 also runs
# bf16-f16 with q/k/v and gate/up one launch each, DYNVRAM_CM2_STACK=off,
# as bf16-f16-nostack, stacked wherever the kernel can, =always, as
# bf16-f16-stack-always, as auto with its tiles in groups of row tiles,
# =grouped, as bf16-f16-stack-grouped, then bf16-f16-again), AGAIN (0: 1 runs int4-f16 a
# second time, last, as int4-f16-again), WARM_GPU (20: seconds of GEMMs
# before the timed runs; a fresh H100 ran its first ~20 s of work 4x slow,
# session 30 — and after it still the first timed prefill of each model,
# 3x slow where the same process's profiled pass was not: compare the
# second runs, RESIDENT_AB's bf16-f16-again and AGAIN's), PEER (1), OUT (bench-out), PARTS ("dyn peer").
set -uo pipefail
cd "$(dirname "$0")/.."
d=${DYNVRAM:-.dev/dynvram}
like=${LIKE:-llama-7b}
layers=${LAYERS:-32}
dir=/tmp/dynvram-$like-L$layers
q=$dir-int4
P=${PROMPT_LEN:-512}
N=${NEW_TOKENS:-64}
parts=${PARTS:-dyn peer}
out=${OUT:-bench-out}/decode
mkdir -p "$out"
jobs=$(nproc)
source bench/gpu_env.sh
t0=$(date +%s)
step() { echo "[$(($(date +%s) - t0)) s] $*"; }
warm() {
    step "warm the GPU (${WARM_GPU:-20} s)"
    timeout "${WARM_GPU:-20}" "$d" bench linear --backend vulkan --shapes 4608x12288x3072 --formats f16 \
        --f16 --gemm coop --reps 100000 --copy-size 0 > /dev/null 2>&1
}

if [[ " $parts " == *" dyn "* ]]; then
    step "model: $like, $layers layers"
    INT4=0 source bench/llama_model.sh
    if [ "${INT4:-1}" = 1 ]; then
        # Quantized first, on every core, not beside the timed runs: the
        # bf16 decode figures swung by ~10 % with a quantization running
        # (runs I-L).
        step "quantize (int4)"
        INT4=1 bash -c "d=$d like=$like layers=$layers dir=$dir q=$q jobs=$jobs; source bench/llama_model.sh" \
            > "$out/quantize.log" 2>&1 || { echo "quantize failed:"; tail -5 "$out/quantize.log"; }
    fi
    warm
    vocab=$(python3 -c "import json; print(json.load(open('$dir/config.json'))['vocab_size'])")
    ids=$(python3 -c "print(','.join(str(3 + (i * 7919) % ($vocab - 3)) for i in range($P)))")
    run() {  # run NAME MODEL_DIR ARGS...
        local name=$1 m=$2
        shift 2
        step "dynvram $name"
        timeout 240 "$d" --json generate "$m" --backend vulkan --prompt-ids "$ids" \
            --max-new-tokens "$N" --ignore-eos --warmup 1 --profile "$@" > "$out/dyn-$name.json" 2> "$out/dyn-$name.err" ||
            { echo "failed:"; tail -5 "$out/dyn-$name.err"; }
    }
    run bf16-f16 "$dir" --compute-dtype f16
    run bf16-f32 "$dir" --compute-dtype f32
    if [ "${SYNC:-0}" = 1 ]; then
        # Greedy decode without the pipelined loop, to compare.
        run bf16-f16-sync "$dir" --compute-dtype f16 --sync-decode
    fi
    if [ "${SPLIT_AB:-0}" = 1 ]; then
        # Prefill's GEMMs without K split (the 128 x 128 tiles instead).
        DYNVRAM_CM2_SPLIT=off run bf16-f16-nosplit "$dir" --compute-dtype f16
    fi
    if [ "${RESIDENT_AB:-0}" = 1 ]; then
        DYNVRAM_CM2_BF16=f16 run bf16-f16-everypass "$dir" --compute-dtype f16
        DYNVRAM_F16_UNPACK=off run bf16-f16-int "$dir" --compute-dtype f16
        run bf16-f16-again "$dir" --compute-dtype f16
    fi
    if [ "${STACK_AB:-0}" = 1 ]; then
        # q/k/v and gate/up one launch each, then stacked wherever the
        # kernel can (where it pays: the default), then the default again.
        DYNVRAM_CM2_STACK=off run bf16-f16-nostack "$dir" --compute-dtype f16
        DYNVRAM_CM2_STACK=always run bf16-f16-stack-always "$dir" --compute-dtype f16
        DYNVRAM_CM2_STACK=grouped run bf16-f16-stack-grouped "$dir" --compute-dtype f16
        run bf16-f16-again "$dir" --compute-dtype f16
    fi
fi

if [[ " $parts " == *" peer "* ]]; then
    step "llama.cpp Vulkan ($layers layers)"
    OUT="$out/peer" LAYERS=$layers PEER_P=$P PEER_N=$N SKIP_DEFAULT_BENCH=1 TBO_TIMEOUT=1 TBO_KEY_TIMEOUT=20 \
        bash .peer/run.sh > "$out/peer.out" 2>&1 || echo "peer failed (see peer.out)"
fi
if [[ " $parts " == *" dyn "* ]] && [ "${INT4:-1}" = 1 ]; then
    [[ " $parts " == *" peer "* ]] && warm
    run int4-f16 "$q" --compute-dtype f16
    if [ "${AGAIN:-0}" = 1 ]; then
        run int4-f16-again "$q" --compute-dtype f16
    fi
    if [ "${SYNC:-0}" = 1 ]; then
        run int4-f16-sync "$q" --compute-dtype f16 --sync-decode
    fi
    if [ "${INT4_SPREAD:-0}" = 1 ]; then
        # The spread quantization instead of the quantization launches:
        # coded in every GEMV workgroup, then coded once by its own kernel.
        DYNVRAM_SPREAD_QUANT=gemv run int4-f16-spread "$q" --compute-dtype f16
        DYNVRAM_SPREAD_QUANT=codes run int4-f16-codes "$q" --compute-dtype f16
    fi
fi
step "table"
python3 bench/decode_table.py "$out" "$P" "$N" | tee "$out/table.md"

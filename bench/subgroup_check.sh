#!/usr/bin/env bash
# The subgroup-scope kernels on the lent NVIDIA GPU (issue 30; first run in
# session 33, BENCHMARKS.md), in named parts, each under its own timeout (a
# device command may run 600 s: split PARTS over calls):
#   kernels  each subgroup-scope GEMM (gemm_sg.glsl) and flash kernel
#            (flash_cm2_sg.glsl: -sg2, -db) once on a small shape, stopping
#            at a GPU fault (Xid); then `bench linear` at FLUX.1's shapes and
#            prefill's 512 rows with each GEMM named beside the default, and
#            `bench attention` at FLUX.1's attention (24 heads x 4608 x 128)
#            with each flash kernel.           -> sg_gemm.txt, sg_flash.json
#   tests    their reference tests and the stacked GEMM's
#            (`spirv_gemm::`, `flash_cm2::`, `linear_folds::`, the
#            extension required).                               -> tests.txt
#   dit      a FLUX.1-dev step at 1024² resident bf16 with --profile: the
#            defaults, then DYNVRAM_CM2_GEMM=$GEMM and DYNVRAM_FLASH=$FLASH
#            (synth and inputs first, kept in /tmp).        -> dit-*.json
#   gqa      bench/decode.sh on Llama-3-8B shapes (GQA) with STACK_AB=1:
#            stacked where it pays (the default) against `off` and `always`.
#                                                      -> decode/table.md
#   bash bench/prepare.sh          # here
#   PARTS="kernels tests" bash bench/subgroup_check.sh   # on the GPU machine (~4 min)
#   PARTS="dit gqa" GEMM=... FLASH=... bash bench/subgroup_check.sh     (~8 min)
# Settings: DYNVRAM (.dev/dynvram), TESTS (.dev/gpu_tests), OUT
# (bench-out), PARTS ("kernels tests"), DIT_RUNS (of "default gemm flash
# both", all by default), GEMM and FLASH (by default the
# fastest at FLUX.1's shapes in $OUT's sg_gemm.txt and sg_flash.json from an
# earlier `kernels`, else gemm_sg_f16_128x128k32w64x64 and cm2-128x64-sg2).
set -uo pipefail
cd "$(dirname "$0")/.."
d=${DYNVRAM:-.dev/dynvram}
tests=${TESTS:-.dev/gpu_tests}
out=${OUT:-bench-out}
mkdir -p "$out"
source bench/gpu_env.sh
parts=" ${PARTS:-kernels tests} "
want() { [[ $parts == *" $1 "* ]]; }
t0=$SECONDS
step() { echo "[$((SECONDS - t0)) s] $*"; }
xid() { dmesg 2> /dev/null | grep -c Xid; }
sg_gemms=$(grep -o '"gemm_sg_[a-z0-9_]*"' shaders/src/spirv.rs | tr -d '"' | paste -sd,)
sg_flash=cm2-128x64-sg,cm2-128x32-sg2,cm2-256x32-sg2,cm2-128x64-sg2,cm2-128x32-sg2-db,cm2-128x32-sg-db
faulted=0

if want kernels; then
    step "subgroup GEMMs once: $sg_gemms"
    n0=$(xid)
    DYNVRAM_GPU_WAIT=15 timeout 60 "$d" bench linear --backend vulkan --shapes 300x600x1216 --formats f16,w4a4 --f16 \
        --gemm auto --reps 2 --copy-size 0 --cm2-kernels "$sg_gemms" 2>&1 | tail -8 | cut -c1-160
    [ "$(xid)" = "$n0" ] || { faulted=1; echo "GPU fault (Xid) after the GEMMs: stopping"; }
    if [ "$faulted" = 0 ]; then
        step "GEMMs at FLUX.1's shapes and prefill's 512 rows"
        DYNVRAM_GPU_WAIT=30 timeout 120 "$d" bench linear --backend vulkan \
            --shapes 4608x3072x3072,4608x12288x3072,4608x3072x12288,4608x21504x3072,4608x3072x15360,512x4096x4096,512x11008x4096 \
            --formats f16,w4a4 --f16 --gemm auto --reps 10 --copy-size 0 --cm2-kernels "$sg_gemms" > "$out/sg_gemm.txt" 2>&1
        grep -E "^(f16|w4a4)|skipped" "$out/sg_gemm.txt" | cut -c1-160
        step "flash kernels once: $sg_flash"
        n0=$(xid)
        for k in ${sg_flash//,/ }; do
            DYNVRAM_GPU_WAIT=15 timeout 40 "$d" bench attention --backend vulkan --queries 256 --keys 256 \
                --heads 2 --head-dim 128 --no-causal --flash "$k" --reps 2 2>&1 | tail -1 | cut -c1-160
        done
        [ "$(xid)" = "$n0" ] || { faulted=1; echo "GPU fault (Xid) after the flash kernels: stopping"; }
    fi
    if [ "$faulted" = 0 ]; then
        step "flash at FLUX.1's attention, two interleaved rounds"
        DYNVRAM_GPU_WAIT=30 timeout 120 "$d" --json bench attention --backend vulkan --queries 4608 --keys 4608 \
            --heads 24 --head-dim 128 --no-causal --reps 5 --flash "cm2-64x32f,$sg_flash,cm2-64x32f,$sg_flash" \
            > "$out/sg_flash.json" 2> "$out/sg_flash.err"
        python3 - "$out/sg_flash.json" << 'EOF'
import json, sys
for r in json.load(open(sys.argv[1]))["figures"]:
    print(f"  {r['tuning']:<22} {r['us']:9.1f} us {r['tflops']:7.1f} TFLOP/s  max diff {r['max_diff']:.2e}")
EOF
    fi
fi
if want tests && [ "$faulted" = 0 ]; then
    step "reference tests (the extension required)"
    DYNVRAM_GPU_WAIT=30 DYNVRAM_REQUIRE_GPU=1 DYNVRAM_REQUIRE_SPIRV=1 timeout 240 "$tests" \
        spirv_gemm:: flash_cm2:: linear_folds:: --test-threads 2 > "$out/tests.txt" 2>&1
    echo "tests exit status $?"
    grep -E "panicked|^test |test result|skipped|left|right" "$out/tests.txt" | cut -c1-300
fi
if want dit; then
    # The fastest subgroup GEMM over FLUX.1's five shapes (total time) and
    # the fastest subgroup flash kernel, where `kernels` timed them.
    GEMM=${GEMM:-$(awk '$1 == "f16" && $2 == 4608 && $NF ~ /^gemm_sg_/ { t[$NF] += $5; n[$NF]++ }
        END { for (k in t) if (n[k] == 5 && (best == "" || t[k] < t[best])) best = k; print best }' \
        "$out/sg_gemm.txt" 2> /dev/null)}
    FLASH=${FLASH:-$(python3 -c "
import json, sys
rs = [r for r in json.load(open(sys.argv[1]))['figures'] if '-sg' in r['tuning'] and r['max_diff'] < 1e-2]
print(min(rs, key=lambda r: r['us'])['tuning'] if rs else '')" "$out/sg_flash.json" 2> /dev/null)}
    GEMM=${GEMM:-gemm_sg_f16_128x128k32w64x64} FLASH=${FLASH:-cm2-128x64-sg2}
    step "GEMM $GEMM, flash $FLASH"
    model=/tmp/flux-dev.safetensors inputs=/tmp/flux-in-1024.safetensors
    [ -e $model ] || { step "synth flux-dev"; timeout 240 "$d" synth --like flux-dev $model > "$out/synth.txt" 2>&1 || tail -3 "$out/synth.txt"; }
    [ -e $inputs ] || timeout 60 python3 bench/flux_inputs.py $inputs --size 1024 > "$out/inputs.txt" 2>&1
    for run in ${DIT_RUNS:-default gemm flash both}; do
        step "dit --profile: $run"
        env=()
        [[ $run == gemm || $run == both ]] && env+=("DYNVRAM_CM2_GEMM=$GEMM")
        [[ $run == flash || $run == both ]] && env+=("DYNVRAM_FLASH=$FLASH")
        env "${env[@]}" timeout 150 "$d" --json dit $model --inputs $inputs --out /tmp/flux-out.safetensors \
            --backend vulkan --warmup 1 --passes 2 --profile > "$out/dit-$run.json" 2> "$out/dit-$run.err" ||
            { tail -3 "$out/dit-$run.err"; continue; }
        python3 - "$out/dit-$run.json" << 'EOF'
import collections, json, sys
r = json.load(open(sys.argv[1]))
p = r.get("profile") or {}
print(f"  best step {r['best_seconds_per_pass']:.4f} s; GPU busy {p.get('gpu_busy_us', 0) / 1e3:.1f} ms")
kinds = collections.defaultdict(lambda: [0, 0.0])
for x in p.get("rows", []):
    k = kinds[x["label"].split(" ")[0]]
    k[0] += x["launches"]
    k[1] += x["gpu_us"]
for name, (n, us) in sorted(kinds.items(), key=lambda kv: -kv[1][1])[:14]:
    print(f"  {name:<44} {n:>5} {us / 1e3:9.2f} ms")
EOF
    done
fi
if want gqa; then
    step "GQA prefill (llama3-8b shapes), stacked or not"
    LIKE=llama3-8b LAYERS=32 PARTS=dyn INT4=0 STACK_AB=1 WARM_GPU=10 OUT="$out" timeout 300 bash bench/decode.sh > "$out/gqa.log" 2>&1
    head -9 "$out/decode/table.md" 2> /dev/null | cut -c1-120
    grep -E "^### .*prefill|gemm_cm2" "$out/decode/table.md" 2> /dev/null | cut -c1-110
fi
step done

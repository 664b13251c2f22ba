#!/usr/bin/env bash
# What landed without an H200 run, in named parts, each under its own
# timeout, results in $OUT. A device command may run 600 s, so the list
# goes in calls of at most ~9 minutes:
#   bash bench/prepare.sh && rm -f .dev/e2e_tests   # here (the carry holds 64 MiB);
#   then `run` with carry [".dev", ".gl", ".peer"] (.peer: bench/README.md, Peer)
#   OUT=$OUT PARTS="tests decode submits rss" bash bench/pending.sh   # ~6 min
# Only a few files come back from a call: TAR=1 leaves the outputs in
# $OUT/p/ and one tarball, $OUT/0.tgz.
# Parts (run in the order PARTS names them):
# tests   gpu_tests with cooperative matrices required: flash attention
#         (the one-walk kernel is the default since session 16), the
#         spread quantization modes (`codes` is the default), argmax, the
#         folds, the pipeline cache, the allocation-free launch path.
#                                                                  -> tests.txt
# decode  bench/decode.sh (bf16 f16/f32 and int4 with the defaults, beside
#         llama.cpp; each run with --profile, whose tables follow the
#         table); SYNC=1 and INT4_SPREAD=1 pass through to it.
#                                                                  -> decode/table.md
# flash   bench/flash_sweep.sh: two-walk vs 128x32w8c2 vs 64x64w4c2.
#                                                                  -> flash_sweep.txt
# flux    FLUX.1-dev `dit` with the two-walk and the 128x32w8c2 kernel,
#         outputs compared (max diff against max |out|), and bf16 at
#         --vram-budget 2.                                  -> dit-*.json, dit-compare.txt
# prefill 512-token prefill with the one-walk kernel (bf16 and int4; needs
#         the decode part's models).                  -> decode/dyn-*-fa1.json
# submits pipelined greedy decode (bf16 and int4, f16 compute, 512-token
#         prompt) with DYNVRAM_SUBMIT_BLOCKS=0 (one submit a token) and 8,
#         beside the decode part's default 4 (needs its models).
#                                                    -> decode/dyn-*-submit*.json
# rss     R1 and start-up with the on-disk pipeline cache, the driver's own
#         shader cache off (__GL_SHADER_DISK_CACHE=0) so that cold is
#         cold: `bench pass --rows 1 --passes 2 --fast-disk --no-pins` peak
#         RSS by mapping and wall time with no pipeline cache, a cold one
#         (an empty folder; the run writes it) and a warm one (what the
#         cold run wrote); mimalloc's peak commit (MIMALLOC_SHOW_STATS=1)
#         is our heap; `dynvram probe`'s peak RSS is the driver baseline,
#         `bench dispatch`'s (one pipeline compiled) the compute baseline.
#         Then `generate` 2 tokens on a 32-layer int4 toy, 3 runs each: no
#         cache, cold, warm.  -> rss-pipeline-cache.txt, startup-pipeline-cache.txt
# gqa     grouped-query decode attention: `bench attention` (32 heads over 8
#         and 32 kv heads, 512/2048/8192 keys) with one head a workgroup
#         (the default) and all heads of a kv head (h8, the old kernel),
#         then Llama-3-8B shapes (bf16, f16 compute) decoding 64 tokens
#         after a 2048-token prompt with each (DYNVRAM_DECODE).
#                                  -> attention-gqa.txt, decode/dyn-llama3-8b-*.json
# gqapeer llama.cpp on GGUF files of Llama-3-8B's shapes (F16 and Q4_0; .peer's
#         make_gguf.py with 8 kv heads, ffn 14336, vocab 128256):
#         pp512/tg64, then tg64 after 2048 tokens of context (-d 2048), as
#         the gqa part's decode runs.     -> peer-llama3/, peer-llama3-d2048.md
# kernels K1-K3 of issue 15 with the defaults: `bench linear` at 1x16384²,
#         1x4096², 4096x12288x3072, int4/int8/bf16, f16 activations.
#                                                            -> kernels.json
# ceilings issue 30 item 1: bench/ceilings.sh as one part (llama.cpp's
#         MUL_MAT / FLASH_ATTN_EXT with and without NV_coopmat2, llama-bench
#         pp512/pp4096, bench coop with padded panels, bench linear at
#         FLUX.1's shapes with the single-stage and double-buffered
#         cooperative GEMMs, flash attention at 24 x 4608 x 128); best alone
#         in its call (~9 min).                           -> ceilings/table.md
# waves   the last-wave split (session 35; the default since session 36):
#         its tests (spirv_gemm:: split, last-wave and integer split;
#         flash_cm2::), flash at FLUX.1's attention (128 x 64 and 128 x 32
#         blocks), `bench linear` at the N = 3072 shapes (f16, w4a4) with
#         DYNVRAM_CM2_SPLIT=auto and =waves, and a FLUX.1-dev step at 1024²
#         (`dit --profile`) with each.
#                 -> waves-tests.txt, waves-flash.txt, waves-linear-*.txt, dit-waves-*.json
# ditops  sessions 38 and 39's work whose GPU results have not come back:
#         the tests (ops_dit:: with qk_place in quads and the copies with
#         four vectors in flight, ada_norm_vec; ops_elementwise::; the
#         SPIR-V GEMMs in spirv_gemm:: with the GELU quotient and the
#         persistent and 64-column kernels; the -qs flash kernels in
#         flash_cm2::), FLUX.1-dev bf16 and int4 steps at 1024² (`dit
#         --profile`; session 38 call 1 had the bf16 step 0.3405 s,
#         gather_vec 7.24 ms, qk_place 6.07, ada_norm 4.09, gated_add_vec
#         3.28), and the -qs flash kernels at FLUX.1's attention (`bench
#         attention`; the default cm2-128x64-sg-lz 184-186 TFLOP/s).
#                    -> ditops-tests.txt, dit-ditops-*.json, ditops-flash.txt
# tiles   whether a GEMM tile's start and end cost the K = 3,072 GEMMs
#         their ~10 % (249 against 275 TFLOP/s at K = 12,288; a linear fit
#         puts ~15 us on each 128 x 256 tile): `bench linear` (f16) at
#         4608 x 21504 x K for K = 1536 ... 12288 and FLUX.1's other shapes
#         with the default, the persistent kernel and the 64-column one
#         (by name), int4 with the persistent int8 kernel; then FLUX.1-dev
#         bf16 and int4 steps with the persistent kernels on large grids
#         (DYNVRAM_CM2_GEMM), beside the defaults (run ditops first in the
#         same machine, or this part makes the models).
#                          -> tiles-f16.txt, tiles-int4.txt, dit-tiles-*.json
# DEADLINE (570 s) caps each call.
set -uo pipefail
cd "$(dirname "$0")/.."
O=${OUT:-bench-out}
[ "${TAR:-0}" = 1 ] && O=$O/p
mkdir -p "$O"
source bench/gpu_env.sh
d=${DYNVRAM:-.dev/dynvram}
t0=$(date +%s)
deadline=${DEADLINE:-570}
# part SECONDS CMD...: CMD under a timeout of at most what is left.
part() {
    local want=$1 left=$((deadline - ($(date +%s) - t0)))
    shift
    [ "$left" -lt 15 ] && { echo "skipped (no time left): $*" >&2; return 1; }
    echo "[$(($(date +%s) - t0)) s] $*" >&2 # not into the part's own output
    timeout $((want < left ? want : left)) "$@"
}
p_tests() {
    DYNVRAM_REQUIRE_GPU=1 DYNVRAM_REQUIRE_COOP=1 DYNVRAM_THOROUGH=1 part 150 .dev/gpu_tests ops_attention:: ops_argmax:: linear_folds:: linear_spread:: launch_allocations:: \
        pipeline_cache:: --test-threads=4 > "$O/tests.txt" 2>&1
    echo "tests: $(grep -E '^test result' "$O/tests.txt")"
    grep -E "FAILED|panicked" "$O/tests.txt" | head -20
}
p_rss() {
    pc=/tmp/dynvram-pipeline-cache pass=/tmp/pass.safetensors
    rm -rf "$pc"
    secs() { python3 -c "import time; print(f'{time.time():.2f}')"; }
    # bench pass writes its stack when absent: once, untimed.
    [ -e "$pass" ] || part 90 "$d" bench pass --backend vulkan --file "$pass" --rows 1 --passes 1 --no-pipeline-cache > /dev/null 2>&1
    for c in "none --no-pipeline-cache" "cold --pipeline-cache $pc" "warm --pipeline-cache $pc"; do
        echo "== ${c%% *}: ${c#* }"
        s=$(secs)
        # shellcheck disable=SC2086 # the flags after the name
        __GL_SHADER_DISK_CACHE=0 MIMALLOC_SHOW_STATS=1 part 60 python3 bench/rss_breakdown.py "$d" bench pass --backend vulkan \
            --file "$pass" --rows 1 --passes 2 --fast-disk --no-pins ${c#* } 2>&1 | grep -Ev "^ +(pages|touched|abandoned|reclaim|reabandon|waits|extended|retire|searches|reset|purged|arenas|rollback|mmaps|commits|resets|purges|guarded|theaps|heaps|heap waits|threads|numa)"
        echo "wall $(python3 -c "print(round($(secs) - $s, 2))") s; cache: $(ls -l "$pc" 2>/dev/null | tail -n +2)"
    done > "$O/rss-pipeline-cache.txt" 2>&1
    echo "== driver baseline: dynvram probe" >> "$O/rss-pipeline-cache.txt"
    part 60 python3 bench/rss_breakdown.py "$d" probe --backend vulkan >> "$O/rss-pipeline-cache.txt" 2>&1
    # The driver as any compute program has it: device opened, one pipeline
    # compiled (NVIDIA's compiler libraries load), a few launches run.
    echo "== driver baseline with a compute pipeline: bench dispatch --launches 4 --reps 1" >> "$O/rss-pipeline-cache.txt"
    __GL_SHADER_DISK_CACHE=0 part 60 python3 bench/rss_breakdown.py "$d" bench dispatch --backend vulkan --launches 4 --reps 1 \
        >> "$O/rss-pipeline-cache.txt" 2>&1
    # The warm run again under allocator settings that a process can also
    # make itself (mallopt, mimalloc options): does any cut the peak here?
    echo "== transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1)" >> "$O/rss-pipeline-cache.txt"
    for e in GLIBC_TUNABLES=glibc.malloc.arena_max=1 GLIBC_TUNABLES=glibc.malloc.trim_threshold=0 MIMALLOC_ARENA_EAGER_COMMIT=0; do
        echo "== warm with $e" >> "$O/rss-pipeline-cache.txt"
        (export "${e?}"; __GL_SHADER_DISK_CACHE=0 MIMALLOC_SHOW_STATS=1 part 60 python3 bench/rss_breakdown.py "$d" bench pass --backend vulkan \
            --file "$pass" --rows 1 --passes 2 --fast-disk --no-pins --pipeline-cache "$pc" 2>&1 | grep -E "peak|committed") >> "$O/rss-pipeline-cache.txt"
    done
    grep -E "^==|peak sampled|peak commit|^wall" "$O/rss-pipeline-cache.txt"
    toy=/tmp/dynvram-m32q pc=/tmp/dynvram-pipeline-cache-toy
    rm -rf "$pc"
    if [ ! -e "$toy/config.json" ]; then
        part 30 "$d" synth --like llama3-tiny --layers 32 /tmp/dynvram-m32 > /dev/null 2>&1
        part 30 "$d" quantize /tmp/dynvram-m32 "$toy" --format convrot_w4a4 > /dev/null 2>&1
    fi
    for c in "none --no-pipeline-cache" "cold --pipeline-cache $pc" "warm --pipeline-cache $pc"; do
        for i in 1 2 3; do
            [ "${c%% *}" = cold ] && rm -rf "$pc"
            s=$(secs)
            # shellcheck disable=SC2086 # the flags after the name
            __GL_SHADER_DISK_CACHE=0 part 30 "$d" generate "$toy" --backend vulkan --prompt-ids 5,6,7 --max-new-tokens 2 \
                --compute-dtype f16 ${c#* } > /dev/null 2>> "$O/startup-pipeline-cache.err"
            echo "${c%% *} run $i: wall $(python3 -c "print(round($(secs) - $s, 2))") s"
        done
    done > "$O/startup-pipeline-cache.txt" 2>&1
    cat "$O/startup-pipeline-cache.txt"; ls -l "$pc"
}
p_flash() {
    DYNVRAM=$d TUNINGS=two-walk,128x32w8c2,64x64w4c2 REPS=2 OUT=$O part 120 bash bench/flash_sweep.sh > /dev/null 2>&1
}
p_flux() {
    flux=/tmp/flux-dev.safetensors in=/tmp/flux-in.safetensors
    [ -e "$flux" ] || part 90 "$d" synth --like flux-dev "$flux" > "$O/flux-synth.txt" 2>&1
    [ -e "$in" ] || python3 bench/flux_inputs.py "$in" > /dev/null 2>&1
    for f in two-walk 128x32w8c2; do
        DYNVRAM_FLASH=$f part 90 "$d" --json dit "$flux" --inputs "$in" --out "/tmp/flux-out-$f.safetensors" \
            --backend vulkan --warmup 1 --passes 2 > "$O/dit-$f.json" 2> "$O/dit-$f.err" || tail -2 "$O/dit-$f.err"
    done
    python3 - > "$O/dit-compare.txt" 2>&1 <<'PY'
import numpy as np
from safetensors.numpy import load_file
a = load_file('/tmp/flux-out-two-walk.safetensors')['out']
b = load_file('/tmp/flux-out-128x32w8c2.safetensors')['out']
print('max|out|', float(np.abs(a).max()), 'max diff', float(np.abs(a - b).max()), 'finite', bool(np.isfinite(b).all()))
PY
    cat "$O/dit-compare.txt"
    part 90 "$d" --json dit "$flux" --inputs "$in" --out /tmp/flux-out-2g.safetensors --backend vulkan \
        --warmup 1 --passes 1 --vram-budget 2 > "$O/dit-bf16-budget-2.json" 2> "$O/dit-bf16-budget-2.err" || tail -2 "$O/dit-bf16-budget-2.err"
}
p_waves() {
    DYNVRAM_REQUIRE_GPU=1 DYNVRAM_REQUIRE_SPIRV=1 part 150 .dev/gpu_tests spirv_gemm::last_wave spirv_gemm::integer_split \
        spirv_gemm::split_spirv flash_cm2:: --test-threads=4 > "$O/waves-tests.txt" 2>&1
    echo "tests: $(grep -E '^test result' "$O/waves-tests.txt")"
    grep -E "FAILED|panicked" "$O/waves-tests.txt" | head -20
    part 120 "$d" bench attention --backend vulkan --queries 4608 --keys 4608 --heads 24 --head-dim 128 --no-causal \
        --reps 5 --flash cm2-128x64-sg-lz,cm2-128x32-sg-lz,cm2-128x64-sg-lz > "$O/waves-flash.txt" 2>&1
    grep -E "cm2" "$O/waves-flash.txt" | cut -c1-200
    for sp in auto waves; do
        DYNVRAM_CM2_SPLIT=$sp part 100 "$d" bench linear --backend vulkan --shapes 4608x3072x15360,4608x3072x3072,4096x3072x12288 \
            --formats f16,w4a4 --f16 --gemm auto --reps 10 --copy-size 0 > "$O/waves-linear-$sp.txt" 2>&1
        echo "$sp:"; grep -E "^(f16|w4a4)" "$O/waves-linear-$sp.txt" | cut -c1-170
    done
    local flux=/tmp/flux-dev.safetensors in=/tmp/flux-in-1024.safetensors
    [ -e "$flux" ] || part 90 "$d" synth --like flux-dev "$flux" > "$O/flux-synth.txt" 2>&1
    [ -e "$in" ] || python3 bench/flux_inputs.py "$in" --size 1024 > /dev/null 2>&1
    for sp in auto waves auto; do
        DYNVRAM_CM2_SPLIT=$sp part 90 "$d" --json dit "$flux" --inputs "$in" --out /tmp/flux-out.safetensors --backend vulkan \
            --warmup 1 --passes 3 --profile > "$O/dit-waves-$sp.json" 2> "$O/dit-waves-$sp.err" || tail -2 "$O/dit-waves-$sp.err"
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], 'best step', r['best_seconds_per_pass'])" \
            "$O/dit-waves-$sp.json" "$sp"
    done
}
# flux_models: sets flux, q and in (FLUX.1-dev synthetic in bf16 and its
# int4, and 1024² inputs), making what is missing.
flux_models() {
    flux=/tmp/flux-dev.safetensors in=/tmp/flux-in-1024.safetensors q=/tmp/flux-dev-int4.safetensors
    [ -e "$flux" ] || part 90 "$d" synth --like flux-dev "$flux" > "$O/flux-synth.txt" 2>&1
    [ -e "$in" ] || python3 bench/flux_inputs.py "$in" --size 1024 > /dev/null 2>&1
    [ -e "$q" ] || part 90 "$d" quantize "$flux" "$q" --format convrot_w4a4 > "$O/flux-quantize.txt" 2>&1
}
# dit_step NAME MODEL: one FLUX.1-dev step at 1024² with --profile into
# $O/dit-NAME.json; prints the step and the rows of the DiT's small
# kernels and the widest GEMMs.
dit_step() {
    part 60 "$d" --json dit "$2" --inputs "$in" --out /tmp/flux-out.safetensors --backend vulkan \
        --warmup 1 --passes 3 --profile > "$O/dit-$1.json" 2> "$O/dit-$1.err" || tail -2 "$O/dit-$1.err"
    python3 - "$O/dit-$1.json" "$1" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(print(sys.argv[2], 'no report:', e))
print(sys.argv[2], 'best step', r['best_seconds_per_pass'])
small = ('gather', 'gather_vec', 'qk_place', 'qk_place_vec', 'ada_norm', 'ada_norm_vec', 'gated_add', 'gated_add_vec')
for x in r['profile']['rows']:
    if x['label'].split()[0] in small or 'x3072 m=4608' in x['label'] or '12288x3072 m=4096' in x['label']:
        print(f"  {x['label'][:60]:60s} {x['launches']:4d} {x['gpu_us'] / 1e3:7.2f} ms")
PY
}
p_ditops() {
    DYNVRAM_REQUIRE_GPU=1 DYNVRAM_REQUIRE_SPIRV=1 part 150 .dev/gpu_tests ops_dit:: ops_elementwise:: \
        spirv_gemm::spirv_gemm_matches spirv_gemm::split_spirv spirv_gemm::persistent ops_attention::flash_cm2:: \
        --test-threads=8 > "$O/ditops-tests.txt" 2>&1
    echo "tests: $(grep -E '^test result' "$O/ditops-tests.txt")"
    grep -E "FAILED|panicked" "$O/ditops-tests.txt" | head -20
    flux_models
    dit_step ditops-bf16 "$flux"
    dit_step ditops-int4 "$q"
    dit_step ditops-bf16-again "$flux"
    part 60 "$d" bench attention --backend vulkan --queries 4608 --keys 4608 --heads 24 --head-dim 128 --no-causal \
        --reps 5 --flash cm2-128x16-sg2-lz-qs,cm2-64x32-sg2-lz-qs,cm2-128x64-sg-lz > "$O/ditops-flash.txt" 2>&1
    tail -6 "$O/ditops-flash.txt"
}
p_tiles() {
    local shapes=4608x21504x1536,4608x21504x3072,4608x21504x6144,4608x21504x12288,4608x3072x3072,4608x3072x12288,4608x9216x3072,4608x12288x3072
    part 150 "$d" bench linear --backend vulkan --formats f16 --f16 --gemm auto --reps 10 --copy-size 0 --shapes "$shapes" \
        --cm2-kernels gemm_cm2_f16_k32_fast_g8_persist,gemm_cm2_f16_k64_fast_g8 > "$O/tiles-f16.txt" 2>&1
    tail -30 "$O/tiles-f16.txt" | cut -c1-160
    part 60 "$d" bench linear --backend vulkan --formats w4a4 --f16 --gemm auto --reps 10 --copy-size 0 \
        --shapes 4608x21504x3072,4608x12288x3072,4608x3072x15360 --cm2-kernels gemm_cm2_w8_k64_fast_g8_persist > "$O/tiles-int4.txt" 2>&1
    tail -8 "$O/tiles-int4.txt" | cut -c1-160
    flux_models
    dit_step tiles-bf16 "$flux"
    DYNVRAM_CM2_GEMM=gemm_cm2_f16_k32_fast_g8_persist dit_step tiles-bf16-persist "$flux"
    dit_step tiles-int4 "$q"
    DYNVRAM_CM2_GEMM=gemm_cm2_w8_k64_fast_g8_persist dit_step tiles-int4-persist "$q"
}
p_decode() {
    PARTS="dyn peer" OUT=$O LAYERS=32 SYNC=${SYNC:-0} INT4_SPREAD=${INT4_SPREAD:-0} part 330 bash bench/decode.sh
}
# decode_model PART: sets dir (the decode part's bf16 model; its int4 twin
# is $dir-int4) and ids (a 512-token prompt), or says PART needs it.
decode_model() {
    dir=/tmp/dynvram-llama-7b-L32
    [ -e "$dir/config.json" ] || { echo "$1: no $dir (run the decode part first)"; return 1; }
    vocab=$(python3 -c "import json; print(json.load(open('$dir/config.json'))['vocab_size'])")
    ids=$(python3 -c "print(','.join(str(3 + (i * 7919) % ($vocab - 3)) for i in range(512)))")
    mkdir -p "$O/decode"
}
p_prefill() {
    decode_model prefill || return
    for m in "$dir" "$dir-int4"; do
        DYNVRAM_FLASH=128x32w8c2 part 60 "$d" --json generate "$m" --backend vulkan --prompt-ids "$ids" \
            --max-new-tokens 64 --ignore-eos --warmup 1 --compute-dtype f16 \
            > "$O/decode/dyn-$(basename "$m")-fa1.json" 2> "$O/decode/fa1.err"
    done
}
p_kernels() {
    part 150 "$d" --json bench linear --backend vulkan --shapes 1x16384x16384,1x4096x4096,4096x12288x3072 \
        --formats w4a4,w8a8,bf16 --f16 --reps 10 > "$O/kernels.json" 2> "$O/kernels.err" || tail -3 "$O/kernels.err"
}
p_gqa() {
    part 120 "$d" bench attention --backend vulkan --keys 512,2048,8192 --heads 32 --kv-heads 8,32 --head-dim 128 \
        --tunings 128x264m4,128x264m4h8,128x264m4h2,512x32m8,512x32m8h8 --reps 50 > "$O/attention-gqa.txt" 2>&1
    cat "$O/attention-gqa.txt"
    m=/tmp/dynvram-llama3-8b
    [ -e "$m/config.json" ] || part 150 "$d" synth --like llama3-8b "$m" > /dev/null 2> "$O/llama3-synth.err"
    vocab=$(python3 -c "import json; print(json.load(open('$m/config.json'))['vocab_size'])")
    ids=$(python3 -c "print(','.join(str(3 + (i * 7919) % ($vocab - 3)) for i in range(2048)))")
    mkdir -p "$O/decode"
    for t in default 128x264m4h8 default; do
        (
            [ "$t" = default ] || export DYNVRAM_DECODE=$t
            part 90 "$d" --json generate "$m" --backend vulkan --prompt-ids "$ids" \
                --max-new-tokens 64 --ignore-eos --warmup 1 --compute-dtype f16 \
                > "$O/decode/dyn-llama3-8b-$t.json" 2> "$O/decode/llama3.err"
        )
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], {k: v for k, v in r.items() if 'tok' in k or 'per_s' in k})" \
            "$O/decode/dyn-llama3-8b-$t.json" "$t" || tail -3 "$O/decode/llama3.err"
    done
}
p_gqapeer() {
    local pm=/tmp/peer-llama3
    mkdir -p "$pm"
    OUT="$O/peer-llama3" MODEL_DIR=$pm KEEP_MODELS=1 LAYERS=32 GEN_ARGS="--ffn 14336 --kv-heads 8 --vocab 128256 --ctx 8192" \
        PEER_P=512 PEER_N=64 SKIP_DEFAULT_BENCH=1 TBO_TIMEOUT=1 TBO_KEY_TIMEOUT=1 part 240 bash .peer/run.sh > "$O/peer-llama3.out" 2>&1
    for f in f16 q4_0; do
        part 120 /tmp/peer-llama-vulkan/llama-bench -m "$pm/llama7b-$f.gguf" -ngl 99 -p 0 -n 64 -d 2048 -fa 0,1 -r 3 -o md \
            >> "$O/peer-llama3-d2048.md" 2>&1
    done
    grep -E "^\| (llama|model)" "$O/peer-llama3/summary.md" "$O/peer-llama3-d2048.md"
}
p_submits() {
    decode_model submits || return
    for k in 0 8; do
        for m in "$dir" "$dir-int4"; do
            DYNVRAM_SUBMIT_BLOCKS=$k part 45 "$d" --json generate "$m" --backend vulkan --prompt-ids "$ids" \
                --max-new-tokens 64 --ignore-eos --warmup 1 --compute-dtype f16 \
                > "$O/decode/dyn-$(basename "$m")-submit$k.json" 2> "$O/decode/submit.err"
        done
    done
}
p_ceilings() {
    local left=$((deadline - ($(date +%s) - t0)))
    DYNVRAM=$d OUT=$O DEADLINE=$((left - 5)) bash bench/ceilings.sh
}
for p in ${PARTS:-tests decode prefill submits flash flux rss}; do
    case $p in
        tests | decode | flash | flux | prefill | submits | rss | kernels | gqa | gqapeer | ceilings | waves | ditops | tiles) "p_$p" ;;
        *) echo "unknown part '$p' (tests decode prefill submits flash flux rss kernels gqa gqapeer ceilings waves ditops tiles)" >&2 ;;
    esac
done
echo "[$(($(date +%s) - t0)) s] done"
[ "${TAR:-0}" = 1 ] && tar czf "$O/../0.tgz" -C "$O" .

#!/usr/bin/env bash
# What landed without an H200 run (session 14), in one device call, in
# priority order; every part under its own timeout, results in $OUT:
#   bash bench/prepare.sh && rm -f .dev/e2e_tests   # here (the carry holds 64 MiB);
#   then `run` with carry [".dev", ".gl", ".peer"] (.peer: bench/README.md, Peer)
#   OUT=$OUT bash bench/pending.sh
# 1. gpu_tests with cooperative matrices required: the one-walk flash
#    kernel (ops_attention: flash_tunings_match_cpu failed on the H200
#    before fa2's alignment fix 8f1af39), both spread modes (linear_spread),
#    argmax and the folds.                                     -> tests.txt
# 2. bench/flash_sweep.sh: two-walk vs 128x32w8c2 vs 64x64w4c2.  -> flash_sweep.txt
# 3. FLUX.1-dev `dit` with the two-walk and the 128x32w8c2 kernel, outputs
#    compared (max diff against max |out|), and bf16 at --vram-budget 2
#    (plans in 1.96 GiB since 2aec808).                           -> dit-*.json, dit-compare.txt
# 4. bench/decode.sh with SYNC=1 INT4_SPREAD=1: pipelined vs --sync-decode
#    greedy decode, int4 with the quantization launches vs both spread
#    modes, beside llama.cpp.                                   -> decode/table.md
# 5. 512-token prefill with the one-walk kernel (bf16 and int4).  -> decode/dyn-*-fa1.json
# Takes ~9.5 min when every part runs; DEADLINE (570 s) caps the total
# (the device allows 600 s a command), so the last parts may be cut.
set -uo pipefail
cd "$(dirname "$0")/.."
O=${OUT:-bench-out}
mkdir -p "$O"
source bench/gpu_env.sh
d=${DYNVRAM:-.dev/dynvram}
t0=$(date +%s)
deadline=${DEADLINE:-570}
# part SECONDS CMD...: CMD under a timeout of at most what is left.
part() {
    local want=$1 left=$((deadline - ($(date +%s) - t0)))
    shift
    [ "$left" -lt 15 ] && { echo "skipped (no time left): $*"; return 1; }
    echo "[$(($(date +%s) - t0)) s] $*"
    timeout $((want < left ? want : left)) "$@"
}
DYNVRAM_REQUIRE_GPU=1 DYNVRAM_REQUIRE_COOP=1 part 150 .dev/gpu_tests ops_attention:: ops_argmax:: linear_folds:: linear_spread:: \
    --test-threads=4 > "$O/tests.txt" 2>&1
echo "tests: $(grep -E '^test result' "$O/tests.txt")"
grep -E "FAILED|panicked" "$O/tests.txt" | head -20
DYNVRAM=$d TUNINGS=two-walk,128x32w8c2,64x64w4c2 REPS=2 OUT=$O part 120 bash bench/flash_sweep.sh > /dev/null 2>&1
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
OUT=$O LAYERS=32 SYNC=1 INT4_SPREAD=1 part 330 bash bench/decode.sh
dir=/tmp/dynvram-llama-7b-L32
if [ -e "$dir/config.json" ]; then
    vocab=$(python3 -c "import json; print(json.load(open('$dir/config.json'))['vocab_size'])")
    ids=$(python3 -c "print(','.join(str(3 + (i * 7919) % ($vocab - 3)) for i in range(512)))")
    for m in "$dir" "$dir-int4"; do
        DYNVRAM_FLASH=128x32w8c2 part 60 "$d" --json generate "$m" --backend vulkan --prompt-ids "$ids" \
            --max-new-tokens 64 --ignore-eos --warmup 1 --compute-dtype f16 \
            > "$O/decode/dyn-$(basename "$m")-fa1.json" 2> "$O/decode/fa1.err"
    done
fi
echo "[$(($(date +%s) - t0)) s] done"

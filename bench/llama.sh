#!/usr/bin/env bash
# dynvram generate vs transformers + accelerate on a 7B-shaped Llama, side by
# side on the GPU machine (issue 9 item 4; see bench/README.md).
#
#   bash bench/llama.sh            # on the H200, from the checkout root
#
# 1. `dynvram synth` a llama-7b-shaped bf16 checkpoint into /tmp (skipped when
#    its config.json is there: synth writes it last), sharded ~1 layer a file.
# 2. int4: each shard through `dynvram quantize --format convrot_w4a4 --only
#    '_proj$'` (one process per shard, all cores: the quantizer is one
#    thread), plus an index, into $MODEL_DIR-int4 (resumable, skipped when
#    done). INT4=0 leaves it out.
# 3. For budgets full / ½ / ¼ of the bf16 weight bytes: `dynvram --json
#    generate` on bf16 and int4, and bench/llama_hf.py on bf16 with the same
#    limit, the same prompt ids and new tokens (HF offloading to CPU is
#    slow: its offloaded runs decode at most $HF_OFFLOAD_TOKENS tokens and
#    $HF_MAX_SECONDS seconds; the table counts the steps it ran).
# 4. A table: tokens/s, ratio to HF bf16 at the same limit, bytes streamed
#    per token and the PCIe (54.7 GB/s pinned) and HBM (4.26 TB/s copy)
#    bounds on tokens/s.
#
# Settings (environment): DYNVRAM (.dev/dynvram), BACKEND (--backend vulkan),
# LIKE (llama-7b), LAYERS (all), MODEL_DIR (/tmp/dynvram-$LIKE), PROMPT_LEN
# (128), NEW_TOKENS (16), INT4 (1), HF (1 when torch imports), SHARD_GIB (0.5), OUT
# (bench-out). Everything lands in $OUT/llama/.
set -uo pipefail
cd "$(dirname "$0")/.."
d=${DYNVRAM:-.dev/dynvram}
backend=${BACKEND---backend vulkan}
like=${LIKE:-llama-7b}
layers=${LAYERS:-}
dir=${MODEL_DIR:-/tmp/dynvram-$like${layers:+-$layers}}
q=$dir-int4
P=${PROMPT_LEN:-128}
N=${NEW_TOKENS:-16}
hf_off_tokens=${HF_OFFLOAD_TOKENS:-8}
hf_max_s=${HF_MAX_SECONDS:-30}
out=${OUT:-bench-out}/llama
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.err "$out"/table.md  # no stale figures in the table
jobs=$(nproc)

source bench/gpu_env.sh
export DYNVRAM_CACHE=${DYNVRAM_CACHE:-/tmp/dynvram-cache}
hf=${HF:-}
if [ -z "$hf" ]; then
    if python3 -c 'import torch, transformers, accelerate' 2> /dev/null; then hf=1; else hf=0; fi
fi
[ "$hf" = 1 ] || echo "transformers/torch not importable here: HF side skipped"
now() { date +%s; }
t_start=$(now)

source bench/llama_model.sh
t_quant=$(now)

read -r vocab bytes < <(python3 -c '
import json, os, sys
d = sys.argv[1]
v = json.load(open(os.path.join(d, "config.json")))["vocab_size"]
b = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors"))
print(v, b)' "$dir")
ids=$(python3 -c "print(','.join(str(3 + (i * 7919) % ($vocab - 3)) for i in range($P)))")
half=$(python3 -c "print(f'{$bytes / 2 / 2**30:.4g}')")
quarter=$(python3 -c "print(f'{$bytes / 4 / 2**30:.4g}')")
echo "bf16 weights $bytes bytes; budgets: full, $half GiB, $quarter GiB; prompt $P ids, $N new tokens"

formats=(bf16)
[ "${INT4:-1}" = 1 ] && formats+=(int4)
for budget in full half quarter; do
    case $budget in
        full) gib=0 flags=() ;;
        half) gib=$half flags=(--vram-budget "$half" --reserve-vram 0) ;;
        quarter) gib=$quarter flags=(--vram-budget "$quarter" --reserve-vram 0) ;;
    esac
    for fmt in "${formats[@]}"; do
        m=$dir
        [ "$fmt" = int4 ] && m=$q
        echo "=== dynvram $fmt, budget $budget ==="
        # shellcheck disable=SC2086 # $backend is flags
        timeout 300 $d --json generate "$m" $backend --prompt-ids "$ids" --max-new-tokens "$N" \
            --ignore-eos --warmup 1 "${flags[@]}" > "$out/dynvram-$fmt-$budget.json" 2> "$out/dynvram-$fmt-$budget.err" ||
            { echo "failed:"; tail -5 "$out/dynvram-$fmt-$budget.err"; }
    done
    if [ "$hf" = 1 ]; then
        n=$N cap=0
        [ "$budget" = full ] || { n=$((N < hf_off_tokens ? N : hf_off_tokens)); cap=$hf_max_s; }
        echo "=== transformers bf16, budget $budget ($n new tokens) ==="
        timeout 300 python3 bench/llama_hf.py "$dir" --budget-gib "$gib" --prompt-ids "$ids" \
            --new-tokens "$n" --max-seconds "$cap" > "$out/hf-bf16-$budget.json" 2> "$out/hf-bf16-$budget.err" ||
            { echo "failed:"; tail -5 "$out/hf-bf16-$budget.err"; }
    fi
done
t_end=$(now)
echo "times: synth $((t_synth - t_start)) s, quantize $((t_quant - t_synth)) s, runs $((t_end - t_quant)) s"

python3 - "$out" "$half" "$quarter" << 'EOF'
import json, os, sys
out, half, quarter = sys.argv[1], sys.argv[2], sys.argv[3]
PCIE, HBM = 54.7e9, 4.26e12
def load(name):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            text = f.read()
    except OSError:
        return None
    try:
        return json.loads(text)  # dynvram --json: one pretty object
    except ValueError:
        pass
    try:
        return json.loads(text.strip().splitlines()[-1])  # llama_hf.py: last line
    except (OSError, ValueError, IndexError):
        return None
def f(x, d=1):
    return "—" if x is None else f"{x:.{d}f}"
def prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
rows = ["| weights | budget | dynvram prefill tok/s | dynvram decode tok/s | HF bf16 prefill tok/s | HF bf16 decode tok/s (steps) | decode ratio | prefill ratio | streamed / token | PCIe max tok/s | HBM max tok/s | same tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for budget, label in [("full", "full"), ("half", f"½ ({half} GiB)"), ("quarter", f"¼ ({quarter} GiB)")]:
    hf = load(f"hf-bf16-{budget}")
    for fmt in ["bf16", "int4"]:
        r = load(f"dynvram-{fmt}-{budget}")
        if r is None and fmt == "int4":
            continue
        dp = r and r["prefill_tokens_per_second"]
        dd = r and r["decode_tokens_per_second"]
        hp = hf and hf["prefill_tokens_per_second"]
        hd = hf and hf["decode_tokens_per_second"]
        st = r and r["streamed_bytes_per_token"]
        weights = r and r["model"]["model_bytes"]
        pcie = (PCIE / st if st else float("inf")) if r else None
        hbm = HBM / weights if r and weights else None
        same = f"{prefix(r['tokens'], hf['tokens'])}/{min(len(r['tokens']), len(hf['tokens']))}" if r and hf else "—"
        rows.append("| " + " | ".join([
            fmt, label, f(dp), f(dd, 2), f(hp), (f(hd, 2) + (f" ({hf['decode_steps']})" if hf else "")),
            f(dd / hd, 2) if dd and hd else "—", f(dp / hp, 2) if dp and hp else "—",
            f(st / 2**20, 1) + " MiB" if st is not None else "—",
            ("∞" if pcie == float("inf") else f(pcie, 1)) if pcie is not None else "—", f(hbm, 1),
            same]) + " |")
print("\n".join(rows))
with open(os.path.join(out, "table.md"), "w") as fh:
    fh.write("\n".join(rows) + "\n")
EOF

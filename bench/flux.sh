#!/usr/bin/env bash
# Issue 19 item 5: one FLUX.1-dev-shaped forward step at 1024² (4096 image +
# 512 text tokens) — dynvram bf16 and int4 (convrot_w4a4), resident and
# under VRAM budgets, beside diffusers' FluxTransformer2DModel resident and
# offloaded, on the same GPU in the same run; ends with the issue's table.
#
#   bash bench/flux.sh   # on the H200 from the checkout root; carry .dev, .gl, .whl
#
# 1. `dynvram synth --like flux-dev` (/tmp, 22.2 GiB, kept between runs on
#    one machine) and bench/flux_inputs.py's inputs.
# 2. dynvram bf16: resident (--warmup 1 --passes 2), then --vram-budget
#    $BUDGETS GiB (--warmup 1 --passes 1; a --timeline SVG at
#    $TIMELINE_BUDGETS). bf16 plans at 1.96 GiB at 4608 tokens (682 MiB
#    of activations + 2 arenas of a double block's 656 MiB); a budget that
#    is too small is followed by the smallest that fits, from the error's
#    "need", with a timeline.
# 3. diffusers (bench/flux_diffusers.py, same inputs): resident and
#    enable_group_offload(block_level, 1 block a group, use_stream=True).
# 4. `dynvram quantize --format convrot_w4a4` of the file (ComfyUI's
#    defaults: embedders, modulations, final layer stay bf16), then int4
#    resident and --vram-budget $INT4_BUDGETS (the same fallback).
# 5. diffusers' other offloads ($DIFFUSERS_EXTRA: record_stream, leaf
#    level, accelerate's sequential cpu_offload).
# 6. bench/flux_table.py: $OUT/flux/table.md.
# The order is the priority: every part runs under `timeout`, limited
# further by what is left of $DEADLINE seconds (a part with < 15 s left is
# skipped), a failure is reported and the script goes on; each part's time
# is printed and kept in parts.tsv. Outputs: $OUT/flux/.
#
# diffusers is not installed on the GPU machine and it has no network: its
# wheel and the dependencies the machine may lack travel in .whl/ (ignored
# by git), installed at the start into /tmp/site (only those whose module
# does not import already; diffusers always). To fill .whl/ here:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl diffusers==0.42.1 regex Pillow requests \
#     charset_normalizer idna urllib3 certifi filelock importlib_metadata zipp packaging tqdm
#
# Settings: DYNVRAM (.dev/dynvram), OUT (bench-out), SIZE (1024), MODEL
# (/tmp/flux-dev.safetensors; a file or a model folder), INT4_MODEL
# (MODEL with -int4), INPUTS (written from SIZE), BUDGETS ("16 8 4 2"),
# INT4_BUDGETS ("16 4 2"), TIMELINE_BUDGETS ("2"), INT4 (1), DIFFUSERS (1),
# DIFFUSERS_MODES (resident,group_block), DIFFUSERS_EXTRA
# (sequential,group_block_rs,group_leaf), DIFFUSERS_ARGS (extra flags of
# flux_diffusers.py), QUANTIZE_ARGS (more `quantize` flags), WHEELS (.whl),
# DEADLINE (540 s), BACKEND (vulkan).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
exec 3>&1
d=${DYNVRAM:-.dev/dynvram}
out=${OUT:-bench-out}/flux
size=${SIZE:-1024}
model=${MODEL:-/tmp/flux-dev.safetensors}
if [[ $model == *.safetensors ]]; then
    int4=${INT4_MODEL:-${model%.safetensors}-int4.safetensors}
else
    int4=${INT4_MODEL:-${model%/}-int4}
fi
inputs=${INPUTS:-/tmp/flux-in-$size.safetensors}
deadline=${DEADLINE:-540}
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.err "$out"/*.svg "$out/parts.tsv" "$out/table.md"
source bench/gpu_env.sh
t0=$SECONDS
last_rc=0

# part NAME LIMIT CMD...: CMD under timeout min(LIMIT, time left); its
# seconds and exit status go to parts.tsv (124: timed out; "skipped").
part() {
    local name=$1 limit=$2 s=$SECONDS rc left
    shift 2
    left=$((deadline - (SECONDS - t0)))
    ((left < limit)) && limit=$left
    if ((limit < 15)); then
        echo "[$((SECONDS - t0)) s] $name: skipped, $left s left of DEADLINE=$deadline" >&3
        printf '%s\t0\tskipped\n' "$name" >> "$out/parts.tsv"
        last_rc=125
        return 125
    fi
    echo "[$((SECONDS - t0)) s] $name (limit $limit s)" >&3
    timeout -k 10 "$limit" "$@"
    rc=$?
    last_rc=$rc
    printf '%s\t%s\t%s\n' "$name" $((SECONDS - s)) "$rc" >> "$out/parts.tsv"
    echo "    $name: $((SECONDS - s)) s, exit $rc" >&3
    return $rc
}

# failed NAME FILE: NAME's failure and FILE's last lines (nothing when skipped).
failed() {
    ((last_rc == 125)) && return
    echo "$1 failed:"
    tail -5 "$2" 2> /dev/null
}

# dit NAME MODEL LIMIT ARGS...: one `dynvram dit` into NAME.json, summarised.
dit() {
    local name=$1 m=$2 limit=$3
    shift 3
    part "$name" "$limit" "$d" --json dit "$m" --inputs "$inputs" --out /tmp/flux-out.safetensors \
        --backend "${BACKEND:-vulkan}" "$@" > "$out/$name.json" 2> "$out/$name.err" ||
        { failed "$name" "$out/$name.err"; return 1; }
    python3 - "$out/$name.json" "$name" << 'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print(f"    {sys.argv[2]}: {d['best_seconds_per_pass']:.3f} s a step, "
          f"{d['streamed_bytes_per_pass'] / 1e9:.2f} GB streamed, peak {d['budget']['peak'] / 2**30:.2f} GiB")
except Exception as e:
    print(f"    {sys.argv[2]}: no report ({e})")
EOF
}

# fit NAME: where NAME.err says the budget is too small, the smallest
# budget that fits (its "need", 0.1 GiB up), else nothing.
fit() {
    python3 - "$out/$1.err" << 'EOF'
import math, re, sys
try:
    m = re.search(r"budget too small:.* need ([0-9.]+) (GiB|MiB|KiB|B);", open(sys.argv[1]).read())
except OSError:
    m = None
if m:
    gib = float(m.group(1)) * {"GiB": 1, "MiB": 2**-10, "KiB": 2**-20, "B": 2**-30}[m.group(2)]
    print(f"{math.ceil((gib + 0.01) * 10) / 10:g}")
EOF
}

# budgets FMT MODEL LIMIT B...: a step at each budget (after a warm-up); the
# first that does not fit is followed by the smallest that does, so the
# table has the figure nearest to it.
budgets() {
    local fmt=$1 m=$2 limit=$3 b f tl fell=""
    shift 3
    for b; do
        tl=()
        [[ " ${TIMELINE_BUDGETS-2} " == *" $b "* ]] && tl=(--timeline "$out/$fmt-budget-$b.svg")
        dit "$fmt-budget-$b" "$m" "$limit" --warmup 1 --passes 1 --vram-budget "$b" "${tl[@]}" && continue
        f=$(fit "$fmt-budget-$b")
        if [ -n "$f" ] && [ -z "$fell" ] && [[ " $* " != *" $f "* ]]; then
            fell=1
            echo "    $fmt at $b GiB does not fit; the smallest budget that does: $f GiB"
            dit "$fmt-budget-$f" "$m" "$limit" --warmup 1 --passes 1 --vram-budget "$f" \
                --timeline "$out/$fmt-budget-$f.svg"
        fi
    done
}

# diffusers NAME MODES LIMIT: bench/flux_diffusers.py into NAME.json.
diffusers() {
    local name=$1 modes=$2 limit=$3 left
    left=$((deadline - (SECONDS - t0)))
    ((left < limit)) && limit=$left
    # The script stops starting modes 10 s before its own timeout.
    # shellcheck disable=SC2086
    part "$name" "$limit" \
        python3 bench/flux_diffusers.py --inputs "$inputs" --modes "$modes" \
        --deadline-s $((limit - 10)) ${DIFFUSERS_ARGS:-} > "$out/$name.json" 2> "$out/$name.err" ||
        failed "$name" "$out/$name.err"
    grep '^\[flux_diffusers\]' "$out/$name.err" 2> /dev/null | sed 's/^/    /'
}

# diffusers and the dependencies this Python lacks, from .whl/ into /tmp/site.
site=/tmp/site
wheels=${WHEELS:-.whl}
install_wheels() {
    local w mod need=() cp
    cp=$(python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
    for w in "$wheels"/*.whl; do
        [ -f "$w" ] || continue
        if [[ $w == *-cp3* && $w != *-$cp-* ]]; then
            echo "skipping ${w##*/}: not for this Python ($cp)"
            continue
        fi
        mod=$(basename "$w")
        mod=${mod%%-*}
        case ${mod,,} in
            diffusers) need+=("$w"); continue ;;
            pillow) mod=PIL ;;
        esac
        python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('$mod') is None)" 2> /dev/null || need+=("$w")
    done
    ((${#need[@]})) || { echo "no wheels in $wheels/"; return 1; }
    echo "installing into $site: ${need[*]##*/}"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "${need[@]}" ||
        { echo "pip failed; unpacking the wheels instead"; for w in "${need[@]}"; do python3 -m zipfile -e "$w" "$site" || return 1; done; }
    PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} python3 -c "import diffusers; print('diffusers', diffusers.__version__)"
}

if [ "${DIFFUSERS:-1}" = 1 ]; then
    part wheels 120 bash -c "$(declare -f install_wheels); site=$site wheels=$wheels; install_wheels" > "$out/wheels.log" 2>&1 ||
        echo "wheels failed: $(tail -3 "$out/wheels.log")"
    tail -1 "$out/wheels.log"
    export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
fi

if [ ! -e "$model" ]; then
    part synth 240 "$d" synth --like flux-dev "$model" > "$out/synth.txt" 2>&1 ||
        failed synth "$out/synth.txt"
fi
[ -e "$inputs" ] || part inputs 60 python3 bench/flux_inputs.py "$inputs" --size "$size"

# Bigger budgets first; the first that does not fit brings in the smallest that does.
dit bf16-resident "$model" 180 --warmup 1 --passes 2
# shellcheck disable=SC2086
budgets bf16 "$model" 150 ${BUDGETS:-16 8 4 2}

[ "${DIFFUSERS:-1}" = 1 ] && diffusers diffusers "${DIFFUSERS_MODES:-resident,group_block}" 150

if [ "${INT4:-1}" = 1 ]; then
    if [ ! -e "$int4" ]; then
        # shellcheck disable=SC2086
        part quantize 240 "$d" --json quantize "$model" "$int4" --format convrot_w4a4 \
            ${QUANTIZE_ARGS:-} > "$out/quantize.json" 2> "$out/quantize.err" ||
            failed quantize "$out/quantize.err"
    fi
    dit int4-resident "$int4" 150 --warmup 1 --passes 2
    # shellcheck disable=SC2086
    budgets int4 "$int4" 120 ${INT4_BUDGETS:-16 4 2}
fi

[ "${DIFFUSERS:-1}" = 1 ] && [ -n "${DIFFUSERS_EXTRA-sequential,group_block_rs,group_leaf}" ] &&
    diffusers diffusers-extra "${DIFFUSERS_EXTRA-sequential,group_block_rs,group_leaf}" 200

echo "[$((SECONDS - t0)) s] table"
python3 bench/flux_table.py "$out" | tee "$out/table.md"
echo "total $((SECONDS - t0)) s"

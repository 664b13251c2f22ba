#!/usr/bin/env bash
# Issue 19 item 5 (part): one FLUX.1-dev-shaped forward step at 1024²
# (4096 image + 512 text tokens), resident and under VRAM budgets.
#
#   bash bench/flux.sh      # on the H200, from the checkout root, with .dev and .gl
#
# Settings: DYNVRAM (.dev/dynvram), BUDGETS ("8"), SIZE (1024), OUT (bench-out).
set -uo pipefail
cd "$(dirname "$0")/.."
d=${DYNVRAM:-.dev/dynvram}
out=${OUT:-bench-out}/flux
model=/tmp/flux-dev.safetensors
inputs=/tmp/flux-in-${SIZE:-1024}.safetensors
mkdir -p "$out"
source bench/gpu_env.sh
[ -f "$model" ] || "$d" synth --like flux-dev "$model" > "$out/synth.txt" 2>&1
python3 bench/flux_inputs.py "$inputs" --size "${SIZE:-1024}"
dit() {  # dit NAME ARGS...
    local name=$1
    shift
    timeout 300 "$d" --json dit "$model" --inputs "$inputs" --out /tmp/flux-out.safetensors \
        --backend vulkan "$@" > "$out/$name.json" 2> "$out/$name.err" ||
        { echo "$name failed:"; tail -5 "$out/$name.err"; }
    python3 -c "import json; d = json.load(open('$out/$name.json')); print('$name', round(d['best_seconds_per_pass'], 3), 's a step,', d['streamed_bytes_per_pass'], 'bytes streamed')"
}
dit resident --warmup 1 --passes 2
for b in ${BUDGETS:-8}; do
    dit "budget-$b" --warmup 1 --passes 1 --vram-budget "$b" --timeline "$out/budget-$b.svg"
done

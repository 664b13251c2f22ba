#!/usr/bin/env bash
# Issue 33 item 7: one FLUX.1-dev image at 1024², 28 steps, from a ComfyUI
# models/ folder of random weights of the four real shapes — dynvram
# resident and at --vram-budget 8, 2 and 1, bf16 and int4 (convrot_w4a4)
# transformer; diffusers' FluxPipeline resident, with
# enable_model_cpu_offload and with leaf-level group offload; on the same
# GPU in the same run; ends with the issue's table.
#
#   bash bench/txt2img.sh   # on the lent GPU from the checkout root; carry .dev, .gl, .whl
#
# 1. `dynvram synth --like flux-dev-comfyui` into $MODELS (34 GB: transformer
#    bf16, T5-XXL f16, CLIP-L f16, VAE f32; kept between runs on one
#    machine), then `quantize --format convrot_w4a4` of the transformer
#    beside it (ComfyUI's defaults).
# 2. dynvram `txt2img --json`, one image per setting ($SETTINGS: "resident",
#    or a budget in GiB), the bf16 transformer, then the int4 one.
# 3. diffusers (bench/txt2img_diffusers.py): resident, model_cpu_offload,
#    group_leaf. The GPU machine's image has torch, transformers and
#    tokenizers; diffusers' wheel travels in .whl/:
#      python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#        --platform manylinux2014_x86_64 -d .whl diffusers==0.42.1
# 4. stable-diffusion.cpp's Vulkan build (bench/sdcpp.sh; its binary,
#    built from source by the procedure in bench/README.md, travels as
#    $SDCPP_TAR, default .pack/sd-vulkan-bin.tar.xz), with what time is left.
# 5. bench/txt2img_table.py: $OUT/txt2img/table.md; everything but the
#    PNGs also in $OUT/txt2img.tgz (a device run returns few files).
# Every part runs under `timeout`, limited by what is left of $DEADLINE
# seconds; a failure is reported and the script goes on. The dynvram
# settings at 28 steps take ~1 min each at today's step time: split the run
# over two calls with SETTINGS/INT4/DIFFUSERS when a call's limit is short.
#
# Settings: DYNVRAM (.dev/dynvram), OUT (bench-out), MODELS (/tmp/comfy),
# SIZE (1024), STEPS (28), SETTINGS ("resident 8 2 1"), BF16 (1), INT4 (1),
# WARMUP (1: a 256², 2-step image per transformer first, not counted),
# DIFFUSERS (1), SDCPP (1), SDCPP_TAR, DIFFUSERS_MODES (resident,model_cpu_offload,group_leaf),
# WHEELS (.whl), DEADLINE (570 s), BACKEND (vulkan), LOCAL (0; 1 runs dynvram
# on the CPUs of the GPU's NUMA node), UPLOAD (1: `bench upload` after the
# dynvram rows, its rates under the table).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
d=${DYNVRAM:-.dev/dynvram}
out=${OUT:-bench-out}/txt2img
models=${MODELS:-/tmp/comfy}
size=${SIZE:-1024}
steps=${STEPS:-28}
deadline=${DEADLINE:-570}
start=$(date +%s)
mkdir -p "$out"
left() { echo $((deadline - ($(date +%s) - start))); }
part() { # part NAME CMD...: under the time left, its seconds in parts.tsv
    local name=$1 t l
    shift
    l=$(left)
    if [ "$l" -lt 15 ]; then
        echo "[txt2img.sh] $name: skipped, ${l} s left" >&2
        return 0
    fi
    t=$(date +%s)
    timeout "$l" "$@"
    local rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" $(($(date +%s) - t)) >>"$out/parts.tsv"
    [ $rc -eq 0 ] || echo "[txt2img.sh] $name: exit $rc" >&2
    return 0
}
flux="$models/diffusion_models/flux1-dev.safetensors"
int4="$models/diffusion_models/flux1-dev-int4.safetensors"
[ -f "$flux" ] || part synth "$d" synth "$models" --like flux-dev-comfyui
if [ "${INT4:-1}" = 1 ] && [ ! -f "$int4" ]; then
    part quantize "$d" quantize "$flux" "$int4" --format convrot_w4a4
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
# LOCAL=1: dynvram runs on the CPUs of the GPU's NUMA node, so its pins
# (first touched by those threads) sit in the memory nearest the GPU —
# whether the stream's 25 GiB/s at 8 GiB (session 24) is cross-socket.
pin=()
if [ "${LOCAL:-0}" = 1 ]; then
    bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f')
    dev=/sys/bus/pci/devices/${bus#0000}
    cpus=$(cat "$dev/local_cpulist" 2>/dev/null)
    echo "GPU $bus: NUMA node $(cat "$dev/numa_node" 2>/dev/null), CPUs $cpus" | tee -a "$out/gpu.txt"
    [ -n "$cpus" ] && pin=(taskset -c "$cpus")
fi
one() { # one LABEL MODEL SETTING
    local label=$1 model=$2 s=$3 budget=()
    [ "$s" = resident ] || budget=(--vram-budget "$s")
    part "$label-$s" "${pin[@]}" "$d" --json txt2img "$models" --model "$model" \
        --prompt "a photo of a cat wearing a tiny red hat" --width "$size" --height "$size" \
        --steps "$steps" --seed 1 --backend "${BACKEND:-vulkan}" "${budget[@]}" \
        --out "$out/$label-$s.png" >"$out/$label-$s.json" 2>"$out/$label-$s.err"
}
# One small image per transformer first, not counted: the machine's first
# process compiles every pipeline cold (most likely what session 23's first
# row spent most of its encode stage on), and the ones after find the driver's and
# dynvram's pipeline caches warm.
if [ "${WARMUP:-1}" = 1 ]; then
    for label in bf16 int4; do
        model=$flux
        [ "$label" = int4 ] && model=$int4
        { [ "$label" = bf16 ] && [ "${BF16:-1}" = 1 ]; } || { [ "$label" = int4 ] && [ "${INT4:-1}" = 1 ]; } || continue
        part "warmup-$label" "$d" --json txt2img "$models" --model "$model" --prompt "warm up" \
            --width 256 --height 256 --steps 2 --seed 1 --backend "${BACKEND:-vulkan}" \
            --out "/tmp/txt2img-warmup.png" >"$out/warmup-$label.json" 2>"$out/warmup-$label.err"
    done
fi
if [ "${BF16:-1}" = 1 ]; then
    for s in ${SETTINGS:-resident 8 2 1}; do one bf16 "$flux" "$s"; done
fi
if [ "${INT4:-1}" = 1 ]; then
    for s in ${SETTINGS:-resident 8 2 1}; do one int4 "$int4" "$s"; done
fi
# The machine's host → VRAM rates beside the rows: the budget rows' steps
# move with them (session 26: bf16 at 8 GiB 0.497 s a step on one H100
# machine, 0.591 on another).
if [ "${UPLOAD:-1}" = 1 ] && { [ "${BF16:-1}" = 1 ] || [ "${INT4:-1}" = 1 ]; }; then
    part upload "$d" --json bench upload --backend "${BACKEND:-vulkan}" --file /tmp/txt2img-upload.bin \
        --size 4GiB --threads 16 --reps 3 >"$out/upload.json" 2>"$out/upload.err"
    rm -f /tmp/txt2img-upload.bin
fi
if [ "${DIFFUSERS:-1}" = 1 ]; then
    site=/tmp/site
    mkdir -p "$site"
    for w in "${WHEELS:-.whl}"/*.whl; do [ -f "$w" ] && python3 -m pip install -q --no-deps --target "$site" "$w"; done
    PYTHONPATH=$site part diffusers python3 bench/txt2img_diffusers.py --size "$size" --steps "$steps" \
        --modes "${DIFFUSERS_MODES:-resident,model_cpu_offload,group_leaf}" \
        --deadline-s "$(left)" >"$out/diffusers.json" 2>"$out/diffusers.err"
fi
if [ "${SDCPP:-1}" = 1 ] && [ -f "${SDCPP_TAR:-.pack/sd-vulkan-bin.tar.xz}" ]; then
    # stable-diffusion.cpp's Vulkan build (bench/sdcpp.sh), same folder and
    # prompt, its flash attention on.
    l=$(left)
    [ "$l" -gt 60 ] && OUT=$out M=$models STEPS=$steps SIZE=$size TIMEOUT=$((l - 10)) \
        TAR=${SDCPP_TAR:-.pack/sd-vulkan-bin.tar.xz} EXTRA_ARGS=--diffusion-fa \
        bash bench/sdcpp.sh >"$out/sdcpp.out" 2>&1
fi
python3 bench/txt2img_table.py "$out" | tee "$out/table.md"
# One tarball of everything but the images, beside the folder: the device's
# run returns only a few files.
tar czf "$out.tgz" --exclude='*.png' -C "$(dirname "$out")" "$(basename "$out")"

#!/usr/bin/env bash
# The SPIR-V cooperative-matrix-2 GEMM (shaders/spirv/, issue 30 item 3) on
# the lent NVIDIA GPU, in one run of about 1.5 minutes:
#   1. `dynvram probe`: which path each GEMM takes there, and why;
#   2. its reference tests (`.dev/gpu_tests spirv_gemm::`, with the extension
#      required: DYNVRAM_REQUIRE_SPIRV=1) and the WGSL float GEMM tests beside;
#   3. `dynvram --json bench linear` at FLUX.1's shapes and K3, bf16 and int4
#      weights, f16 activations, cooperative GEMMs: with the SPIR-V path, then
#      with the WGSL path (DYNVRAM_SPIRV_GEMM=off), on the same device.
#   4. the same bench at K3, two FLUX.1 shapes and prefill's 512 rows with
#      each SPIR-V kernel named (`--cm2-kernels`, CM2_KERNELS): the fast
#      f16 and int8 loops on 128 x 256 tiles (the defaults) and 128 x 128
#      (small grids), bf16 weights on the f16 kernels and int4 on the int8
#      ones, converted as by default (session 27's 256 x 128, 256 x 256 and
#      64 x 128 probes are in BENCHMARKS.md);
#      then bf16 weights
#      on the bf16 kernels (`DYNVRAM_CM2_BF16=staged`; the default converts
#      them to f16 for the f16 kernels); then small grids with K split
#      and not (DYNVRAM_CM2_SPLIT=off, auto, 2, 4: SPLITS, SPLIT_SHAPES);
#   5. the SPIR-V flash kernels one by one (FLASH=0 skips; the `f` ones
#      load inner key blocks unclamped, not chosen before they are
#      measured), then, where none faulted, their reference test and their
#      time at FLUX.1's attention beside the WGSL kernels'.
# Writes $OUT/spirv_probe.{txt,json}, spirv_tests.txt,
# spirv_bench_{spirv,wgsl,kernels,split_*,bf16_staged}.json, spirv_flash_tests.txt,
# spirv_flash_bench.json.
#
#   bash bench/prepare.sh         # here: .dev/dynvram, .dev/gpu_tests, .gl
#   bash bench/spirv_check.sh     # on the GPU machine, from the checkout root
#
# Settings: DYNVRAM (.dev/dynvram), TESTS (.dev/gpu_tests), SHAPES and
# KERNEL_SHAPES (steps 3 and 4), KERNELS (1; 0 skips step 4), FORMATS
# (f16,bf16,w4a4), REPS (10), OUT (bench-out).
set -uo pipefail
cd "$(dirname "$0")/.."
d=${DYNVRAM:-.dev/dynvram}
tests=${TESTS:-.dev/gpu_tests}
out=${OUT:-bench-out}
mkdir -p "$out"
source bench/gpu_env.sh
# The float SPIR-V GEMMs are on by default; this script asks for all of them.
export DYNVRAM_SPIRV_GEMM=auto
step() { echo "=== $* ($(date -u +%T))"; }

step "probe: the GEMMs' path per weight format"
timeout 15 "$d" probe --backend vulkan > "$out/spirv_probe.txt" 2>&1
grep -E "^[^ ]|cooperative|float GEMM|integer GEMM" "$out/spirv_probe.txt" | cut -c1-300
# The figures the chooser reads (features, limits, the flexible shapes).
timeout 15 "$d" --json probe --backend vulkan > "$out/spirv_probe.json" 2>&1

step "reference tests: spirv_gemm:: (extension required), f16_linear::float"
DYNVRAM_REQUIRE_GPU=1 DYNVRAM_REQUIRE_SPIRV=1 DYNVRAM_REQUIRE_COOP=1 RUST_BACKTRACE=1 \
  timeout 90 "$tests" spirv_gemm:: f16_linear::float --nocapture > "$out/spirv_tests.txt" 2>&1
echo "tests exit status $?"
grep -E "panicked|failed|^test |test result|skipped|gemm_cm2.*worst|equal to ComfyUI" "$out/spirv_tests.txt" | cut -c1-300

shapes=${SHAPES:-4608x9216x3072,4608x12288x3072,4608x21504x3072,4608x3072x12288,4608x3072x15360,4096x12288x3072}
table() {
  python3 - "$1" 2>/dev/null <<'EOF' || cat "$1"
import json, sys
for f in json.load(open(sys.argv[1])):
    print(f"{f['format']:<6} {f['m']:>5}x{f['n']:>5}x{f['k']:>5}  {f['ms']:8.3f} ms  {f['tflops']:7.1f} TFLOP/s  {f['kernel']}")
EOF
}
for path in spirv wgsl; do
  step "bench linear, $path path"
  spirv=auto
  [ "$path" = wgsl ] && spirv=off
  DYNVRAM_SPIRV_GEMM=$spirv timeout 80 "$d" --json bench linear --backend vulkan \
    --shapes "$shapes" --formats "${FORMATS:-f16,bf16,w4a4}" --f16 --gemm coop \
    --reps "${REPS:-10}" --copy-size 0 > "$out/spirv_bench_$path.json" 2> "$out/spirv_bench_$path.err"
  echo "bench exit status $?"
  tail -3 "$out/spirv_bench_$path.err" | cut -c1-300
  table "$out/spirv_bench_$path.json"
done

if [ "${KERNELS:-1}" = 1 ]; then
step "bench linear, every SPIR-V kernel side by side (K3, FLUX.1's 4608x12288x3072, prefill's 512 rows)"
timeout 150 "$d" --json bench linear --backend vulkan --shapes "${KERNEL_SHAPES:-4096x12288x3072,4608x12288x3072,4608x3072x15360,512x4096x4096,512x11008x4096,512x4096x11008}" \
  --formats f16,bf16,w4a4,w8a8 --f16 --gemm coop --reps "${REPS:-10}" --copy-size 0 \
  --cm2-kernels "${CM2_KERNELS:-gemm_cm2_f16_k32_fast,gemm_cm2_f16_n128_fast,gemm_cm2_f16_n128u4_fast,gemm_cm2_w8_k64_fast,gemm_cm2_w8_n128_fast}" \
  > "$out/spirv_bench_kernels.json" 2> "$out/spirv_bench_kernels.err"
echo "bench exit status $?"
tail -3 "$out/spirv_bench_kernels.err" | cut -c1-300
table "$out/spirv_bench_kernels.json"
# Split K on small grids (DYNVRAM_CM2_SPLIT: off takes the 128 x 128 tiles,
# auto the split of the 128 x 256 kernel, a number that many splits), at
# prefill's and FLUX.1's text-stream shapes (512 rows), a full grid beside.
for split in ${SPLITS:-off auto 2 4}; do
  step "bench linear, small grids, DYNVRAM_CM2_SPLIT=$split"
  DYNVRAM_CM2_SPLIT=$split timeout 80 "$d" --json bench linear --backend vulkan \
    --shapes "${SPLIT_SHAPES:-512x4096x4096,512x11008x4096,512x4096x11008,512x3072x3072,512x3072x12288,512x9216x3072,4608x12288x3072}" \
    --formats f16,bf16 --f16 --gemm coop --reps "${REPS:-10}" --copy-size 0 \
    > "$out/spirv_bench_split_$split.json" 2> "$out/spirv_bench_split_$split.err"
  echo "bench exit status $?"
  tail -3 "$out/spirv_bench_split_$split.err" | cut -c1-300
  table "$out/spirv_bench_split_$split.json"
done
step "bench linear, bf16 weights on the bf16 kernels (DYNVRAM_CM2_BF16=staged)"
DYNVRAM_CM2_BF16=staged timeout 70 "$d" --json bench linear --backend vulkan --shapes "$shapes" \
  --formats bf16 --f16 --gemm coop --reps "${REPS:-10}" --copy-size 0 \
  > "$out/spirv_bench_bf16_staged.json" 2> "$out/spirv_bench_bf16_staged.err"
echo "bench exit status $?"
tail -3 "$out/spirv_bench_bf16_staged.err" | cut -c1-300
table "$out/spirv_bench_bf16_staged.json"
fi

# 5. The SPIR-V flash kernels (opt-in: their first launches faulted with an
#    MMU fault, Xid 13, on 2026-12-06 — they bound wgpu's binding numbers,
#    not Vulkan's; fixed in 1bd6d5a): each at a small shape, a fault
#    turned into an error by a short GPU wait limit, the kernel log's Xid
#    count before and after; then the reference test where none faulted.
[ "${FLASH:-1}" = 1 ] || exit 0
faulted=0
for t in ${FLASH_KERNELS:-cm2-64x32 cm2-64x64 cm2-128x32 cm2-128x64 cm2-128x32f cm2-128x32f2 cm2-64x32f cm2-64x32f2}; do
  n0=$(dmesg 2>/dev/null | grep -c Xid)
  step "flash $t at 256 x 256, 2 heads"
  DYNVRAM_GPU_WAIT=15 timeout 40 "$d" bench attention --backend vulkan --queries 256 --keys 256 \
    --heads 2 --head-dim 128 --no-causal --flash "$t" --reps 2 2>&1 | tail -2 | cut -c1-250
  n1=$(dmesg 2>/dev/null | grep -c Xid)
  echo "exit ${PIPESTATUS[0]}; Xid lines in the kernel log: $n0 -> $n1"
  [ "$n1" = "$n0" ] || faulted=1
done
if [ "$faulted" = 0 ]; then
  step "flash reference tests (flash_cm2::)"
  DYNVRAM_GPU_WAIT=30 DYNVRAM_REQUIRE_GPU=1 DYNVRAM_REQUIRE_SPIRV=1 timeout 120 "$tests" flash_cm2:: --nocapture \
    > "$out/spirv_flash_tests.txt" 2>&1
  echo "tests exit status $?"
  grep -E "panicked|failed|^test |test result|skipped|cases" "$out/spirv_flash_tests.txt" | cut -c1-300
  # FLUX.1's attention (24 heads x 4608 x 128, no mask): the device's
  # default kernel first, then every SPIR-V one, the two fastest
  # (cm2-64x32f, the default since session 27, and cm2-128x32) twice more,
  # interleaved, as single runs moved by ~10 %; each output is compared
  # with the first's (max_diff).
  step "flash at FLUX.1's shape: the default, then the SPIR-V kernels"
  DYNVRAM_GPU_WAIT=30 timeout 120 "$d" --json bench attention --backend vulkan --queries 4608 --keys 4608 \
    --heads 24 --head-dim 128 --no-causal --reps 10 \
    --flash "${FLASH_KERNELS_FLUX:-128x32w8c2pr,cm2-128x32,cm2-64x32,cm2-128x32f,cm2-128x32f2,cm2-64x32f,cm2-64x32f2,cm2-128x32,cm2-64x32f,cm2-128x32,cm2-64x32f}" \
    > "$out/spirv_flash_bench.json" 2> "$out/spirv_flash_bench.err"
  echo "bench exit status $?"
  tail -3 "$out/spirv_flash_bench.err" | cut -c1-300
  head -c 3000 "$out/spirv_flash_bench.json"
fi

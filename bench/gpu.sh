#!/usr/bin/env bash
# Everything measured on the GPU machine, in one go (see bench/README.md).
# Expects the release binary in .dev/dynvram and the Vulkan loader debs in .gl/
# (and, for the real-VRAM fault row, the tests crate's test binary in .dev/e2e_tests;
# for the kernel checks, the gpu crate's test binary in .dev/gpu_tests).
# Correctness first (probe, conformance, run), then timings; every output
# lands in $OUT (or ./bench-out). PARTS picks steps (default: all but llama):
#   PARTS="check sweep linear torch pass s2 rss upload faults llama tune" bash bench/gpu.sh
# (NO_COPY_QUEUE=1 adds the pass on wgpu's queue; COOP_SHAPES lists the
# cooperative GEMM shapes timed beside dot4.)
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export XDG_RUNTIME_DIR=/tmp DYNVRAM_CACHE=/tmp/dynvram-cache RUST_LOG=warn
out=${OUT:-bench-out}; mkdir -p "$out"
# GPU clocks and power through the whole run: a kernel far below the memory
# limit may just be running at a low memory clock.
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,pstate,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,utilization.gpu,utilization.memory \
    --format=csv -lms 250 > "$out/clocks.csv" 2>&1 &
  smi=$!; trap 'kill $smi 2>/dev/null' EXIT
fi
parts=" ${PARTS:-check linear torch pass s2 rss upload faults} "
d=.dev/dynvram
b="--backend vulkan"
step() { echo; echo "=== $* === ($(date +%T), ${SECONDS}s in)"; }
want() { [[ $parts == *" $1 "* ]]; }
if want check; then
  step probe;        $d probe $b 2>&1 | tee "$out/probe.txt"
  step conformance;  $d conformance fixtures/conformance $b 2>&1 | tail -4
  step run;          $d run $b 2>&1 | tee "$out/run.txt"
  if [ -x .dev/gpu_tests ]; then
    # The linear kernels (cooperative-matrix GEMM required: 16x16 tensor
    # cores on NVIDIA) and the attention kernels (the decode kernel's
    # 32-lane subgroup sums, which no software adapter has) against the
    # CPU reference on this GPU.
    step "linear and attention property tests (cooperative matrices required)"
    DYNVRAM_REQUIRE_GPU=1 DYNVRAM_REQUIRE_COOP=1 RUST_BACKTRACE=0 timeout 300 .dev/gpu_tests \
      linear_random:: f16_linear:: ops_attention:: --nocapture > "$out/gpu_tests.txt" 2>&1
    grep -E "panicked|failed:|^test |test result|subgroup sums" "$out/gpu_tests.txt" | cut -c1-400
  fi
fi
if want sweep; then
  step "cooperative GEMM shapes (bench/coop_sweep.sh)"
  OUT="$out" bash bench/coop_sweep.sh > /dev/null 2>&1
  grep -E "TFLOP|coop-matrix" "$out/coop_sweep.txt" | cut -c1-200
fi
if want linear; then
  # The layer shapes N x K at one M.
  shapes() { echo "$1x16384x16384,$1x12288x3072,$1x3072x12288,$1x4096x4096"; }
  all=w4a4,w4a8,w8a8,fp8,f16
  step "bench linear M=1 (K1, K2)"
  $d bench linear $b --shapes "$(shapes 1)" --formats $all --reps 50 2>&1 | tee "$out/linear_m1.txt"
  step "bench linear M=1 with naga's loop counters (DYNVRAM_SHADER_CHECKS=all, wgpu's default)"
  DYNVRAM_SHADER_CHECKS=all $d bench linear $b --shapes 1x16384x16384 --formats w4a4,w8a8,f16 --reps 50 --copy-size 0 2>&1 | tee -a "$out/linear_m1.txt"
  step "bench linear M=1, N=32: the fixed cost (activation rotation/quantization and dispatches) without a weight stream"
  $d bench linear $b --shapes 1x32x16384,1x32x4096 --formats w4a4,w8a8,f16 --reps 50 --copy-size 0 2>&1 | tee "$out/linear_fixed.txt"
  step "bench linear M=16, 256"
  $d bench linear $b --shapes "$(shapes 16),$(shapes 256)" --formats $all --reps 10 --copy-size 0 2>&1 | tee "$out/linear_mid.txt"
  step "bench linear M=4096 (K3): the kernel each format takes (cooperative matrices where it can)"
  timeout 200 $d bench linear $b --shapes "$(shapes 4096)" --formats $all --gemm auto --reps 1 --copy-size 0 2>&1 | tee "$out/linear_big.txt"
  timeout 60 $d bench linear $b --shapes "$(shapes 4096)" --formats f16,fp8 --f16 --gemm auto --reps 2 --copy-size 0 2>&1 | tee -a "$out/linear_big.txt"
  step "bench linear M=4096: dot4 beside cooperative matrices, a few workgroup shapes"
  timeout 120 $d bench linear $b --shapes 4096x12288x3072 --formats w4a4,w8a8 --gemm both \
    --coop-shapes ${COOP_SHAPES:-4x4x32,4x4x16,2x4x32} --reps 2 --copy-size 0 2>&1 | tee "$out/linear_coop.txt"
fi
if want torch; then
  step "pytorch baselines"
  python3 -c "import torch,safetensors.torch as s; s.save_file({'w': torch.randn(2**31 // 4096, 4096, dtype=torch.bfloat16)}, '/tmp/w4g.safetensors')" 2>&1 | tail -2
  timeout 300 python3 bench/torch_baseline.py /tmp/w4g.safetensors 2>&1 | tee "$out/torch.json"
fi
if want tune; then
  step "GEMV workgroup shapes at M=1, 16384^2 and 4096^2 (rows x invocations; with and without shader checks)"
  for checks in all none; do
    for rows in 1 2 4 8 16; do
      for wgs in 64 128 256 512; do
        DYNVRAM_SHADER_CHECKS=$checks $d bench linear $b --shapes 1x16384x16384,1x4096x4096 --formats w4a4,w8a8,f16 --reps 50 --copy-size 0 \
          --gemv-rows $rows --gemv-wgs $wgs 2>&1 | grep -E '^(w4a4|w8a8|f16) ' | sed "s/^/checks=$checks rows=$rows wgs=$wgs /"
      done
    done
  done 2>&1 | tee "$out/tune.txt"
fi
if want pass; then
  step "bench pass: S1, a 7 GiB f16 MLP stack at budget 1/4 of it, then 1/2"
  $d bench pass $b --file /tmp/pass.safetensors --rows 1,16,64 --passes 3 2>&1 | tee "$out/pass.txt"
  $d bench pass $b --file /tmp/pass.safetensors --rows 1,16,64 --passes 3 --ratio 2 2>&1 | tee -a "$out/pass.txt"
  if [ -n "${NO_COPY_QUEUE:-}" ]; then
    $d bench pass $b --file /tmp/pass.safetensors --rows 1,16,64 --passes 3 --no-copy-queue 2>&1 | tee -a "$out/pass.txt"
  fi
fi
if want s2; then
  step "S2: the same streamed pass in PyTorch (pinned memory, two streams)"
  timeout 300 python3 bench/torch_offload.py --rows 1,16,64 2>&1 | tee "$out/torch_offload.json"
fi
if want rss; then
  step "R1: peak host RSS while streaming with --fast-disk (ring 3 x 64 MiB), by mapping"
  for flags in "--fast-disk" "--fast-disk --no-pins"; do
    echo "$flags:"
    # shellcheck disable=SC2086 # $b and $flags are flags
    python3 bench/rss_breakdown.py $d bench pass $b --file /tmp/pass.safetensors --rows 1 --passes 2 $flags 2>&1 | tee -a "$out/rss.txt"
  done
fi
if want upload; then
  step "bench upload 4 GiB"
  $d bench upload $b --file /tmp/upload.bin --size 4GiB --threads 16 --reps 3 2>&1 | tee "$out/upload.txt"
fi
if want faults && [ -x .dev/e2e_tests ]; then
  step "real VRAM exhaustion (issue 8): the ignored faults test"
  DYNVRAM_REAL_OOM=1 DYNVRAM_REQUIRE_GPU=1 timeout 180 .dev/e2e_tests --ignored real_vram --nocapture 2>&1 | tail -20 | tee "$out/faults.txt"
fi
if want llama; then
  step "llama-7b generate vs transformers (bench/llama.sh)"
  OUT="$out" bash bench/llama.sh 2>&1 | tee "$out/llama.txt"
fi
if want linear; then
  step "the linear table (bench/table.py)"
  python3 bench/table.py "$out" 2>&1 | tee "$out/table.md"
fi

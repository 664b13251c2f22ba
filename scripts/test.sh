#!/usr/bin/env bash
# The test suite: every crate's tests once on the software Vulkan adapter
# (lavapipe), then the GPU tests again on GL (llvmpipe), which has no f16 and
# no subgroups and so exercises the fallback kernels, then the
# cooperative-matrix kernels on a newer lavapipe that has them. A missing
# adapter fails the run instead of skipping (DYNVRAM_REQUIRE_GPU=1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-adapter.sh
start=$(date +%s)
stage() { echo "=== $* (at $(($(date +%s) - start)) s) ==="; }
export DYNVRAM_REQUIRE_GPU=1 RUST_BACKTRACE=1
# Set: the cooperative-matrix stage must run (CI); the other stages' adapters
# have no cooperative matrices, so it is not passed on to them.
require_coop="${DYNVRAM_REQUIRE_COOP:-}"
unset DYNVRAM_REQUIRE_COOP
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# Every stage selects the whole workspace and runs the binary cargo test built:
# selecting a subset (-p, cargo run --bin) unifies features differently and
# rebuilds wgpu and every crate above it.
dynvram="${CARGO_TARGET_DIR:-target}/debug/dynvram"

stage "SPIR-V kernels: spirv-val and a fresh compile of each (trixie's glslc)"
# The committed .spv files of shaders/spirv/ must validate for Vulkan 1.3 and
# equal what their .comp compiles to (scripts/spirv.sh, tools unpacked beside
# the system like the Mesa 26 stage's).
if scripts/spirv.sh --fetch >/dev/null; then
  scripts/spirv.sh --check
else
  echo "skipped: SPIR-V check (trixie's glslc and spirv-tools could not be fetched)"
fi

stage "build the tests"
cargo test --workspace --no-run

stage "all tests, GPU tests on Vulkan (lavapipe)"
WGPU_BACKEND=vulkan cargo test --workspace -- --nocapture

stage "GPU tests on GL (llvmpipe)"
# The integration tests that drive an adapter (kernels, models, cross-crate),
# each from its crate's folder as cargo runs them; the unit tests and the
# CLI's own tests do not depend on the backend (the CLI runs on GL below).
# The decode loop's full pipelining cases (the slowest of the models
# crate's tests) check scheduling, not kernels: Vulkan above runs them, GL
# the shorter ones.
gl_crates=(gpu models tests)
gl_skips=("" "llama_pipelined::pipelined_greedy_equals_sync_on_tiny_llama" "")
gl_bins=$(cargo test --workspace --no-run --message-format=json 2>/dev/null |
  scripts/test-binary.py "${gl_crates[@]}")
mapfile -t gl_bins <<< "$gl_bins"
for i in "${!gl_crates[@]}"; do
  skip=()
  [ -n "${gl_skips[$i]}" ] && skip=(--skip "${gl_skips[$i]}")
  (cd "${gl_crates[$i]}" && WGPU_BACKEND=gl "${gl_bins[$i]}" --nocapture "${skip[@]}")
done

stage "dynvram conformance on both adapters, each arithmetic"
for b in vulkan gl; do
  for ld in auto int4 int8; do
    "$dynvram" conformance fixtures/conformance --backend "$b" --linear-dtype "$ld"
  done
done

stage "dynvram run smoke test on both adapters"
for b in vulkan gl; do
  "$dynvram" run --backend "$b"
done

stage "cooperative-matrix kernels on Mesa 26 lavapipe (trixie-backports)"
# Bookworm's lavapipe has no cooperative matrices; Mesa 26's has, unpacked
# beside the system (scripts/with-coop-lavapipe.sh). The linear tests there
# must take the cooperative GEMM and the attention tests flash attention
# (DYNVRAM_REQUIRE_COOP=1), and warm launches of both allocate nothing;
# its partial VK_NV_cooperative_matrix2 opens the device with raw SPIR-V, so
# the SPIR-V launch path runs its check kernel there; then conformance.
coop=scripts/with-coop-lavapipe.sh
if "$coop" /bin/true; then
  gpu_tests=$(cargo test --workspace --no-run --message-format=json 2>/dev/null | scripts/test-binary.py gpu)
  DYNVRAM_REQUIRE_COOP=1 "$coop" "$gpu_tests" linear_random:: f16_linear:: linear_conformance:: ops_attention:: launch_allocations:: spirv_gemm::
  "$coop" "$dynvram" conformance fixtures/conformance --backend vulkan
  "$coop" "$dynvram" run --backend vulkan
elif [ -n "$require_coop" ]; then
  echo "Mesa 26 lavapipe could not be fetched and DYNVRAM_REQUIRE_COOP is set" >&2
  exit 1
else
  echo "skipped: cooperative-matrix kernels (Mesa 26 lavapipe could not be fetched)"
fi
echo "all tests passed"

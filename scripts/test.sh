#!/usr/bin/env bash
# The test suite: every crate's tests once on the software Vulkan adapter
# (lavapipe), then the GPU tests again on GL (llvmpipe), which has no f16 and
# no subgroups and so exercises the fallback kernels. A missing adapter fails
# the run instead of skipping (DYNVRAM_REQUIRE_GPU=1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-adapter.sh
export DYNVRAM_REQUIRE_GPU=1 RUST_BACKTRACE=1
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# Every stage selects the whole workspace and runs the binary cargo test built:
# selecting a subset (-p, cargo run --bin) unifies features differently and
# rebuilds wgpu and every crate above it.
dynvram="${CARGO_TARGET_DIR:-target}/debug/dynvram"

echo "=== all tests, GPU tests on Vulkan (lavapipe) ==="
WGPU_BACKEND=vulkan cargo test --workspace -- --nocapture

echo "=== GPU tests on GL (llvmpipe) ==="
WGPU_BACKEND=gl cargo test --workspace -- --nocapture

if [ -d ../shared/conformance ]; then
  echo "=== dynvram conformance on both adapters, each arithmetic ==="
  for b in vulkan gl; do
    for ld in auto int4 int8; do
      "$dynvram" conformance ../shared/conformance --backend "$b" --linear-dtype "$ld"
    done
  done
else
  echo "skipped: dynvram conformance (../shared/conformance is absent)"
fi

echo "=== dynvram run smoke test on both adapters ==="
for b in vulkan gl; do
  "$dynvram" run --backend "$b"
done
echo "all tests passed"

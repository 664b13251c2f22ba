#!/usr/bin/env bash
# Builds what bench/gpu.sh needs on the GPU machine (which has no Rust
# toolchain) into .dev/, and the Vulkan loader packages into .gl/; then send
# both along (`run` with carry [".dev", ".gl"]). From the checkout root:
#   bash bench/prepare.sh
# .dev/dynvram          release binary, stripped
# .dev/gpu_tests        the gpu crate's tests (gpu.sh `check`: its
#                       linear_random:: f16_linear:: ops_attention:: modules,
#                       cooperative matrices required)
# .dev/e2e_tests        the tests crate's tests (gpu.sh `faults`: real VRAM
#                       exhaustion)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .dev
cargo build --release --bin dynvram
strip -o .dev/dynvram "${CARGO_TARGET_DIR:-target}/release/dynvram"
# The test binaries cargo test builds (the workspace as a whole: selecting a
# subset unifies features differently and rebuilds wgpu).
set -- $(cargo test --workspace --no-run --message-format=json 2>/dev/null | scripts/test-binary.py gpu tests)
strip -o .dev/gpu_tests "$1"
strip -o .dev/e2e_tests "$2"
# (gpu.sh `check` reads the goldens from fixtures/conformance, which travels
# with the checkout.)
rm -rf .dev/conformance
[ -n "$(ls .gl/*.deb 2>/dev/null)" ] || bash scripts/vulkan-loader-debs.sh .gl
du -sh .dev .gl

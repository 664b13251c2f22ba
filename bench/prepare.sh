#!/usr/bin/env bash
# Builds what bench/gpu.sh needs on the GPU machine (which has no Rust
# toolchain) into .dev/, and the Vulkan loader packages into .gl/; then send
# both along (`run` with carry [".dev", ".gl"]). From the checkout root:
#   bash bench/prepare.sh
# .dev/dynvram          release binary, stripped
# .dev/linear_random    the linear property tests (gpu.sh `check`, coop required)
# .dev/faults           the fault tests (gpu.sh `faults`: real VRAM exhaustion)
# .dev/conformance      fixtures/conformance (gpu.sh `check`)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .dev
cargo build --release --bin dynvram
strip -o .dev/dynvram target/release/dynvram
# The test binaries cargo test builds (the workspace as a whole: selecting a
# subset unifies features differently and rebuilds wgpu).
cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, shutil, subprocess, sys
want = {"linear_random", "faults"}
for line in sys.stdin:
    m = json.loads(line)
    name = m.get("target", {}).get("name")
    if m.get("reason") == "compiler-artifact" and m.get("executable") and name in want:
        subprocess.run(["strip", "-o", f".dev/{name}", m["executable"]], check=True)
        want.discard(name)
if want:
    sys.exit(f"test binaries not built: {sorted(want)}")'
if [ -d fixtures/conformance ]; then
  rm -rf .dev/conformance && cp -r fixtures/conformance .dev/conformance
fi
[ -n "$(ls .gl/*.deb 2>/dev/null)" ] || bash ../shared/tools/vulkan-loader-debs.sh .gl
du -sh .dev .gl

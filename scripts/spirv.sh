#!/usr/bin/env bash
# Compiles the SPIR-V kernels (shaders/spirv/*.comp, GLSL for NVIDIA's
# cooperative matrices 2, which WGSL cannot express) to the committed .spv
# files beside them, with Debian trixie's glslc (shaderc 2025.2, glslang 15.1:
# the first with GL_NV_cooperative_matrix2 in Debian) and spirv-val
# (SPIRV-Tools 2025.1).
#
# The packages are unpacked, not installed, and run under trixie's own dynamic
# loader with trixie's libraries, as scripts/with-coop-lavapipe.sh runs Mesa:
# the machine's toolchain stays as it is. Downloads about 20 MB once into
# $SPIRV_TOOLS_DIR (default target/spirv-tools).
#
# Usage:
#   scripts/spirv.sh            compile every .comp to its .spv
#   scripts/spirv.sh --check    spirv-val each committed .spv (Vulkan 1.3) and
#                               check it equals a fresh compile of its .comp
#   scripts/spirv.sh --fetch    only fetch the tools (exit 1 if they cannot be)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${SPIRV_TOOLS_DIR:-$root/target/spirv-tools}"
lib="$dir/root/usr/lib/x86_64-linux-gnu"
bin="$dir/root/usr/bin"
src="$root/shaders/spirv"
if [ ! -x "$bin/spirv-val" ] || [ ! -x "$bin/glslc" ]; then
  echo "fetching glslc and spirv-tools from trixie into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$dir/root"
  printf 'deb http://deb.debian.org/debian trixie main\n' >"$dir/sources.list"
  : >"$dir/status"
  apt=(-o Dir::Etc::sourcelist="$dir/sources.list" -o Dir::Etc::sourceparts=/dev/null
    -o Dir::State::Lists="$dir/lists" -o Dir::State::status="$dir/status"
    -o Dir::Cache::archives="$dir/archives" -o Debug::NoLocking=1)
  apt-get "${apt[@]}" update -qq
  # An empty status file: apt fetches the whole closure (glibc included).
  apt-get "${apt[@]}" install --download-only -y -qq glslc spirv-tools >/dev/null
  for deb in "$dir"/archives/*.deb; do dpkg -x "$deb" "$dir/root"; done
fi
run() { "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$@"; }
compile() { run "$bin/glslc" --target-env=vulkan1.3 -O "$1" -o "$2"; }

case "${1:-}" in
  --fetch)
    run "$bin/glslc" --version | head -1
    ;;
  --check)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    status=0
    for comp in "$src"/*.comp; do
      name=$(basename "$comp" .comp)
      spv="$src/$name.spv"
      if [ ! -f "$spv" ]; then
        echo "$spv: missing (run scripts/spirv.sh)" >&2
        status=1
        continue
      fi
      run "$bin/spirv-val" --target-env vulkan1.3 "$spv" || { echo "$spv: spirv-val failed" >&2; status=1; }
      compile "$comp" "$tmp/$name.spv"
      cmp -s "$spv" "$tmp/$name.spv" || { echo "$spv: differs from a fresh compile of $name.comp (run scripts/spirv.sh)" >&2; status=1; }
    done
    for spv in "$src"/*.spv; do
      [ -f "${spv%.spv}.comp" ] || { echo "$spv: no $(basename "${spv%.spv}").comp beside it" >&2; status=1; }
    done
    [ "$status" = 0 ] && echo "spirv: every .spv validates and matches its .comp"
    exit "$status"
    ;;
  "")
    for comp in "$src"/*.comp; do
      compile "$comp" "${comp%.comp}.spv"
      run "$bin/spirv-val" --target-env vulkan1.3 "${comp%.comp}.spv"
      echo "compiled $(basename "$comp")"
    done
    ;;
  *)
    echo "usage: scripts/spirv.sh [--check | --fetch]" >&2
    exit 2
    ;;
esac

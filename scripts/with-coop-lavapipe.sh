#!/usr/bin/env bash
# Runs a command on Mesa 26's lavapipe (Debian trixie-backports), the one
# software adapter with VK_KHR_cooperative_matrix (bookworm's Mesa 22.3 has
# none), so the cooperative-matrix kernels are tested without a GPU.
#
# The packages are unpacked, not installed: the command runs under trixie's
# own dynamic loader with trixie's libraries (`ld.so --library-path`), so the
# machine's Mesa and glibc stay as they are. Downloads about 64 MB once into
# $COOP_LAVAPIPE_DIR (default target/coop-lavapipe).
#
# Usage: scripts/with-coop-lavapipe.sh PROGRAM [ARGS...]   (PROGRAM: a path)
set -euo pipefail
dir="${COOP_LAVAPIPE_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target/coop-lavapipe}"
lib="$dir/root/usr/lib/x86_64-linux-gnu"
if [ ! -f "$dir/lvp.json" ]; then
  echo "fetching Mesa lavapipe from trixie-backports into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$dir/root"
  printf 'deb http://deb.debian.org/debian trixie main\ndeb http://deb.debian.org/debian trixie-backports main\n' \
    >"$dir/sources.list"
  : >"$dir/status"
  apt=(-o Dir::Etc::sourcelist="$dir/sources.list" -o Dir::Etc::sourceparts=/dev/null
    -o Dir::State::Lists="$dir/lists" -o Dir::State::status="$dir/status"
    -o Dir::Cache::archives="$dir/archives" -o Debug::NoLocking=1)
  apt-get "${apt[@]}" update -qq
  # An empty status file: apt fetches the whole closure (glibc included).
  apt-get "${apt[@]}" install --download-only -y -qq -t trixie-backports \
    mesa-vulkan-drivers libvulkan1 >/dev/null
  for deb in "$dir"/archives/*.deb; do dpkg -x "$deb" "$dir/root"; done
  sed "s#\"libvulkan_lvp.so\"#\"$lib/libvulkan_lvp.so\"#" \
    "$dir/root/usr/share/vulkan/icd.d/lvp_icd.json" >"$dir/lvp.json.tmp"
  mv "$dir/lvp.json.tmp" "$dir/lvp.json"
fi
export VK_DRIVER_FILES="$dir/lvp.json" WGPU_BACKEND=vulkan
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$@"

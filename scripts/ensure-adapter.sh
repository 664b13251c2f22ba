#!/usr/bin/env bash
# Makes sure a wgpu adapter exists: a real GPU driver, or Mesa's software
# Vulkan adapter (lavapipe). GL llvmpipe comes with Mesa's GL libraries.
set -euo pipefail
for icd in /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json; do
  [ -e "$icd" ] && exit 0
done
echo "no Vulkan driver found: installing mesa-vulkan-drivers (lavapipe)" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq mesa-vulkan-drivers libegl1 libgl1 >/dev/null

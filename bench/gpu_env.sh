# Sourced by the bench scripts on the GPU machine: unpack the Vulkan loader
# from .gl/ and point it at NVIDIA's driver (once; a no-op where
# VK_DRIVER_FILES is set or there is no NVIDIA ICD), quiet logs.
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ] && ls .gl/*.deb > /dev/null 2>&1; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    export VK_DRIVER_FILES=$icd
fi
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} RUST_LOG=${RUST_LOG:-warn}

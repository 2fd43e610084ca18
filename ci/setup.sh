#!/usr/bin/env bash
# System tools the test suite uses, from Debian (the README's test command runs this first; CI runs as
# root).  Idempotent.  Without root the tools are not installed and the tests that need them skip,
# naming the tool.
#   - pocl-opencl-icd: an OpenCL CPU device, so the GPU renderer's OpenCL text runs (tests/codegen)
#   - hipcc (ROCm 5.2, about 0.5 GB): the rocm backend's HIP text is compiled for gfx90a/gfx908 (tests/gpu)
#   - g++: the CUDA-semantics CPU emulator runs the emitted .cu/.hip text (tests/gpu/test_emulation*)
#   - gcc-arm-none-eabi, libnewlib-arm-none-eabi, qemu-system-arm: the mcu backend's Cortex-M builds (tests/mcu)
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
    echo "ci/setup.sh: not root; skipping apt-get (tests needing PoCL, arm-none-eabi-gcc or qemu will skip)"
    exit 0
fi
want=()
[ -e /etc/OpenCL/vendors/pocl.icd ] || want+=(pocl-opencl-icd)
command -v arm-none-eabi-gcc > /dev/null || want+=(gcc-arm-none-eabi libnewlib-arm-none-eabi)
command -v qemu-system-arm > /dev/null || want+=(qemu-system-arm)
command -v hipcc > /dev/null || want+=(hipcc)
command -v g++ > /dev/null || want+=(g++)
if [ ${#want[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${want[@]}" > /dev/null
fi

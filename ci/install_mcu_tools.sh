#!/bin/sh
# Tools of the mcu backend's Cortex-M tests (tests/mcu/test_arm.py): the Arm cross compiler with
# newlib (semihosting via rdimon), QEMU for mps2-an385 (Cortex-M3) / mps2-an386 (Cortex-M4), and
# unicorn + pyelftools for exact instruction counts.  Called by .ci/run; safe to run again.
set -eu
apt-get update
apt-get install -y gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm
python -m pip install "unicorn>=2.1,<3" "pyelftools>=0.29"

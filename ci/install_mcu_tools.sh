#!/bin/sh
# Tools of the mcu backend's tests: the Arm cross compiler with newlib (semihosting via rdimon) and
# QEMU for mps2-an385 (Cortex-M3) / mps2-an386 (Cortex-M4) (tests/mcu/test_arm.py); unicorn +
# pyelftools for exact instruction counts; tflite-micro + flatbuffers for the int8 oracle
# (tests/mcu/test_tflite_oracle.py); scikit-learn for the digits data.  Called by .ci/run; safe to
# run again.
set -eu
apt-get update
apt-get install -y gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm
python -m pip install "unicorn>=2.1,<3" "pyelftools>=0.29" "tflite-micro" "flatbuffers>=23" "scikit-learn>=1.3"

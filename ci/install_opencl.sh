#!/usr/bin/env bash
# An OpenCL CPU device for the GPU renderer's execution tests: Debian's PoCL 3.1 (PyPI's PoCL 3.0 cannot
# build programs on some CPUs: "unknown target CPU 'generic'").  Idempotent; needs root (CI runs as root).
set -euo pipefail
if [ -e /etc/OpenCL/vendors/pocl.icd ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then echo "install_opencl.sh: not root, skipping (OpenCL tests will skip)"; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq pocl-opencl-icd > /dev/null

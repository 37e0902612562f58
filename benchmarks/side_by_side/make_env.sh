#!/usr/bin/env bash
# Builds the Python environment of the CPU side-by-side (benchmarks/side_by_side/side_by_side.py):
# the venv of the transformers interop tests (tests/python/make_env.sh: torch's CPU build,
# transformers, safetensors) plus DeepSpeed from PyPI. Never part of `make test`.
#
#   benchmarks/side_by_side/make_env.sh [VENV_DIR=build/sbs-env]
#
# DeepSpeed is installed with no prebuilt op (DS_BUILD_OPS=0): its CPU Adam and async_io ops are
# JIT-compiled on first use against this torch. async_io (NVMe offload) needs libaio's header
# (Debian: libaio-dev, in scripts/install-deps.sh).
set -euo pipefail

cd "$(dirname "$0")/../.."
venv=${1:-build/sbs-env}
tests/python/make_env.sh "$venv"
pip=("$venv/bin/python" -m pip)
# setuptools: DeepSpeed's op builder imports it for the JIT build (Python 3.12 has no distutils).
"${pip[@]}" install -q setuptools wheel ninja
if ! "$venv/bin/python" -c 'import deepspeed' >/dev/null 2>&1; then
  DS_BUILD_OPS=0 "${pip[@]}" install -q --no-build-isolation deepspeed
fi
"$venv/bin/python" -c 'import deepspeed; print("make_env: deepspeed", deepspeed.__version__)'

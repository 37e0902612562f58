#!/usr/bin/env bash
# Builds the Python environment of the CPU side-by-side (benchmarks/side_by_side/run.sh): a venv
# with the CPU build of torch (PyTorch's CPU wheel index: ~200 MB instead of the CUDA build's
# several GB), transformers and DeepSpeed from PyPI. Never part of `make test`.
#
#   benchmarks/side_by_side/make_env.sh [VENV_DIR=build/sbs-env]
#
# DeepSpeed is installed with no prebuilt op (DS_BUILD_OPS=0): its CPU Adam and async_io ops are
# JIT-compiled on first use against this torch. async_io (NVMe offload) needs libaio's header
# (Debian: libaio-dev, in scripts/install-deps.sh).
set -euo pipefail

cd "$(dirname "$0")/../.."
venv=${1:-build/sbs-env}
python=${PYTHON:-python3}

if ! "$python" -m venv --help >/dev/null 2>&1; then
  echo "make_env: $python has no venv module (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
if [[ ! -x "$venv/bin/python" ]]; then
  echo "make_env: creating $venv"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip
if ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
  # PyTorch's CPU index first; where it cannot be reached (only PyPI is), PyPI's wheel, which
  # pulls the CUDA libraries too (several GB) but runs on the CPU all the same.
  if ! "${pip[@]}" install -q --retries 1 --timeout 20 \
      --index-url https://download.pytorch.org/whl/cpu torch; then
    echo "make_env: PyTorch's CPU wheel index is unreachable; installing torch from PyPI" >&2
    "${pip[@]}" install -q torch
  fi
fi
# setuptools: DeepSpeed's op builder imports it for the JIT build (Python 3.12 has no distutils).
"${pip[@]}" install -q transformers safetensors setuptools wheel ninja
if ! "$venv/bin/python" -c 'import deepspeed' >/dev/null 2>&1; then
  DS_BUILD_OPS=0 "${pip[@]}" install -q --no-build-isolation deepspeed
fi
"$venv/bin/python" -c 'import torch, transformers, deepspeed; print("make_env: torch", torch.__version__, "transformers", transformers.__version__, "deepspeed", deepspeed.__version__)'

#!/usr/bin/env bash
# Builds the Python environment of the `python`-labelled tests (tests/python/hf_interop_test.py):
# a venv with the CPU build of torch (from PyTorch's own CPU wheel index, ~200 MB instead of the
# CUDA build's several GB), transformers and safetensors. `make python-env` runs it; `make test`
# never does (CI time), and the tests skip with a reason where the venv is missing.
# Usage: tests/python/make_env.sh VENV_DIR
set -euo pipefail

venv=${1:?usage: make_env.sh VENV_DIR}
python=${PYTHON:-python3}

if ! "$python" -m venv --help >/dev/null 2>&1; then
  echo "make_env: $python has no venv module (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
if [[ ! -x "$venv/bin/python" ]]; then
  echo "make_env: creating $venv"
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
if ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
  # PyTorch's CPU index first; where it cannot be reached (only PyPI is), PyPI's wheel, which
  # pulls the CUDA libraries too (several GB) but runs on the CPU all the same.
  if ! "$venv/bin/python" -m pip install -q --retries 1 --timeout 20 \
      --index-url https://download.pytorch.org/whl/cpu torch; then
    echo "make_env: PyTorch's CPU wheel index is unreachable; installing torch from PyPI" >&2
    "$venv/bin/python" -m pip install -q torch
  fi
fi
"$venv/bin/python" -m pip install -q transformers safetensors
"$venv/bin/python" -c 'import torch, transformers, safetensors; print("make_env: torch", torch.__version__, "transformers", transformers.__version__, "safetensors", safetensors.__version__)'

#!/usr/bin/env bash
# ctest's entry to hf_interop_test.py: runs it with the venv's Python, or exits 77 (ctest's
# SKIP_RETURN_CODE) saying why when there is no venv with torch and transformers.
# Usage: run_hf_interop_test.sh SLUICE_BINARY DEFAULT_VENV
set -euo pipefail

binary=$1
venv=${SLUICE_PYTHON_ENV:-$2}
here=$(cd "$(dirname "$0")" && pwd)

if [[ ! -x "$venv/bin/python" ]] ||
   ! "$venv/bin/python" -c 'import torch, transformers, safetensors' >/dev/null 2>&1; then
  echo "SKIPPED: no Python environment with torch, transformers and safetensors at $venv;" \
       "build it with \`make python-env\` (tests/python/make_env.sh), or set SLUICE_PYTHON_ENV"
  exit 77
fi
# Threads: the test's models are tiny, and ctest may run other tests beside it.
export OMP_NUM_THREADS=1
exec "$venv/bin/python" "$here/hf_interop_test.py" "$binary"

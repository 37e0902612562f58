#!/usr/bin/env bash
# Packs DeepSpeed for a GPU machine without internet that has PyTorch and transformers (issue 19's
# side-by-side run, scripts/gpu-side-by-side.sh): a DeepSpeed wheel with no prebuilt ops, so that
# its CPU Adam (and, for NVMe offload, async_io) is JIT-compiled there by the machine's own
# compiler against the machine's own torch; the dependencies DeepSpeed needs that a
# torch + transformers install lacks, as wheels for every CPython from 3.10 to 3.14 (the GPU
# machine's version is not known here); the sdist as a fallback; and libaio (headers and
# library, from Debian) for the NVMe runs.
#
#   scripts/ds-bundle.sh [OUT=.gpubundle/ds] [DEEPSPEED_SPEC=deepspeed]
#
# Needs pip and PyPI here. The wheel is built with torch importable (DeepSpeed's setup.py asks
# torch which accelerator it is for): set DS_BUNDLE_PYTHON to a Python that has torch, or the
# script makes a throwaway venv with torch in it (a large download). On the GPU machine:
#
#   python3 -m venv --system-site-packages V && V/bin/pip install --no-index --find-links OUT deepspeed
#
# (gpu-side-by-side.sh does that, with DS_BUILD_OPS=0 and a fallback for a Python without venv).
set -euo pipefail

out=${1:-.gpubundle/ds}
spec=${2:-deepspeed}
mkdir -p "$out"
out=$(realpath "$out")
pyvers=(3.10 3.11 3.12 3.13 3.14)
# DeepSpeed's requirements (requirements/requirements.txt and nvidia-ml-py on CUDA) less torch
# and what transformers already brings (numpy, packaging, tqdm, pyyaml); pydantic's own
# dependencies come along. setuptools and wheel: for building the sdist if the wheel will not do,
# and distutils (Python 3.12 dropped it) for DeepSpeed's has_function probe.
deps=(hjson ninja py-cpuinfo 'pydantic>=2' msgpack einops psutil nvidia-ml-py
  setuptools wheel)

echo "ds-bundle: DeepSpeed ($spec) sdist"
pip download --quiet --no-deps --no-binary :all: -d "$out" "$spec"
sdists=("$out"/deepspeed-*.tar.gz)
sdist=${sdists[-1]}

py=${DS_BUNDLE_PYTHON:-}
if [[ -z $py ]]; then
  if python3 -c 'import torch' 2>/dev/null; then
    py=python3
  else
    venv=${DS_BUNDLE_VENV:-/tmp/ds-bundle-venv}
    echo "ds-bundle: no torch here; installing it into $venv to build the wheel"
    [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch setuptools wheel
    py=$venv/bin/python
  fi
fi
echo "ds-bundle: building the wheel with $py (torch $("$py" -c 'import torch; print(torch.__version__)'))"
# DS_BUILD_OPS=0: no op compiled here, every op JIT-built on the GPU machine. DS_ACCELERATOR=cuda:
# the wheel's metadata and git_version_info are those of a CUDA install although this machine has
# no GPU (the accelerator named there only matters for prebuilt ops, of which there are none).
DS_BUILD_OPS=0 DS_ACCELERATOR=cuda "$py" -m pip wheel --quiet --no-deps --no-build-isolation \
  -w "$out" "$sdist"

for v in "${pyvers[@]}"; do
  echo "ds-bundle: dependencies for CPython $v"
  pip download --quiet --only-binary=:all: --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --python-version "$v" --implementation cp -d "$out" "${deps[@]}" ||
    echo "ds-bundle: warning: some dependencies have no wheel for CPython $v" >&2
done

# libaio for DeepSpeed's async_io op (NVMe offload): the header and the library, unpacked from
# Debian's packages into OUT/libaio/{include,lib}; gpu-side-by-side.sh adds them to CPATH,
# LIBRARY_PATH and LD_LIBRARY_PATH where the machine has no libaio-dev of its own.
if command -v apt-get >/dev/null; then
  debs=$(mktemp -d)
  (cd "$debs" && apt-get download libaio-dev >/dev/null 2>&1 &&
    { apt-get download libaio1t64 >/dev/null 2>&1 || apt-get download libaio1 >/dev/null 2>&1; }) ||
    echo "ds-bundle: warning: libaio packages not downloaded (run apt-get update?)" >&2
  mkdir -p "$out/libaio/include" "$out/libaio/lib"
  for deb in "$debs"/*.deb; do
    [[ -e $deb ]] || continue
    dpkg-deb -x "$deb" "$debs/root"
  done
  if [[ -d $debs/root ]]; then
    find "$debs/root" -name 'libaio.h' -exec cp {} "$out/libaio/include/" \;
    find "$debs/root" -name 'libaio.so*' -exec cp -P {} "$out/libaio/lib/" \;
    # The -dev package's libaio.so may point at libaio.so.1t64 (Debian's t64 rename): give the
    # linker and the loader both names.
    (cd "$out/libaio/lib" && for real in libaio.so.1t64.*; do
      [[ -e $real && ! -e libaio.so.1 ]] && ln -s "$real" libaio.so.1
      break
    done)
  fi
  rm -rf "$debs"
fi

{
  echo "deepspeed-bundle made $(date -u +%FT%TZ) on $(hostname)"
  echo "spec: $spec"
  echo "built with: $("$py" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')"
  ls -1 "$out"
} >"$out/MANIFEST.txt"
wheels=("$out"/*.whl)
ds_wheels=("$out"/deepspeed-*.whl)
echo "ds-bundle: $out ($(du -sh "$out" | cut -f1)): ${ds_wheels[*]##*/}, ${#wheels[@]} wheels"

#!/usr/bin/env bash
# Installs from Debian packages exactly what Sluice's build and tests need. Idempotent: a
# package already present is not touched, and apt is not called at all when nothing is missing.
# Where nvcc exists it also installs the header-only cuDNN frontend from PyPI (cuDNN's fused
# attention, kernels/cuda/attention_cudnn.cpp), again only when it is missing.
set -euo pipefail

# The cuDNN frontend's headers land in Python's site-packages/include, where
# cmake/SluiceCuda.cmake looks for them. --no-deps: only the headers are used, not the Python
# package's runtime dependencies.
cudnn_frontend_version=1.32.0
install_cudnn_frontend() {
  if ! command -v nvcc >/dev/null 2>&1 && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then return 0; fi
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "install-deps: no python3 pip, so no cuDNN frontend: attention runs our own kernels" >&2
    return 0
  fi
  local installed
  # `pip show` fails when the package is absent: that is an empty version, not an error.
  installed=$(python3 -m pip show nvidia-cudnn-frontend 2>/dev/null | sed -n 's/^Version: //p' || true)
  if [[ "$installed" == "$cudnn_frontend_version" ]]; then
    echo "install-deps: nvidia-cudnn-frontend $installed present"
    return 0
  fi
  echo "install-deps: installing nvidia-cudnn-frontend==$cudnn_frontend_version (pip)"
  python3 -m pip install -q --no-deps "nvidia-cudnn-frontend==$cudnn_frontend_version" ||
    echo "install-deps: pip could not install nvidia-cudnn-frontend: attention runs our own kernels" >&2
}

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libgtest-dev libgmock-dev
  liburing-dev libhwloc-dev hwloc libtbb-dev libyaml-cpp-dev nlohmann-json3-dev
  libcli11-dev libfmt-dev libopenblas-openmp-dev libxxhash-dev
  libdnnl-dev  # oneDNN: optional at configure time; device.cpu_gemm blas runs its dnnl_sgemm
  libblis4-openmp  # BLIS, loaded at run time by bench_gemm only (timed, not used for training)
  libopenmpi-dev openmpi-bin
  fio e2fsprogs util-linux
  clang libclang-rt-14-dev  # the fuzzers (tests/fuzz): clang's libFuzzer, ASan and UBSan runtimes
  zlib1g-dev  # the PNG of the loss curve sluice train draws (engine/train/png_writer.cpp)
  python3-venv  # `make python-env`: the venv of the transformers interop tests (tests/python)
  libaio-dev  # DeepSpeed's async_io op (NVMe offload), JIT-built by benchmarks/side_by_side
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  install_cudnn_frontend
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_cudnn_frontend

# shellcheck shell=bash
# Sourced by the scripts that run a Sluice GPU bundle (scripts/gpu-bundle.sh) on a GPU machine:
# gpu-check.sh and gpu-side-by-side.sh.
#
#   sluice_gpu_unpack BUNDLE   unpacks into a fresh /tmp folder: SLUICE_GPU_WORK (remove it at
#                              the end) and SLUICE_GPU_ROOT (its sluice-gpu/: bin, tests, lib)
#   sluice_gpu_libs ROOT       exports LD_LIBRARY_PATH: the bundle's libraries, then CUDA's
#                              where this machine keeps them

sluice_gpu_unpack() {
  SLUICE_GPU_WORK=$(mktemp -d /tmp/sluice-gpu.XXXXXX)
  tar -C "$SLUICE_GPU_WORK" -xJf "$1" || return 1
  # shellcheck disable=SC2034  # read by the scripts that source this one
  SLUICE_GPU_ROOT=$SLUICE_GPU_WORK/sluice-gpu
}

# CUDA's libraries where this machine keeps them: the toolkit, or the pip wheels of a PyTorch
# environment (nvidia/<lib>/lib).
sluice_gpu_libs() {
  local root=$1 d lib
  local cuda_dirs=()
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d $d ]] && cuda_dirs+=("$d")
  done
  while IFS= read -r lib; do cuda_dirs+=("$(dirname "$lib")"); done < <(
    find /usr /opt -maxdepth 9 \( -name 'libcublasLt.so.13*' -o -name 'libnccl.so.2*' -o -name 'libcudnn.so.9*' -o -name 'libnvrtc.so.13*' \) 2>/dev/null |
    sort -u)
  local joined
  joined=$(IFS=:; echo "${cuda_dirs[*]}")
  export LD_LIBRARY_PATH="$root/lib:$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

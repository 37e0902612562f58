#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on a GPU machine that has the NVIDIA driver and CUDA 13
# (runtime, cuBLAS, NCCL) but none of Sluice's other dependencies: the GPU test binaries, the
# `sluice` CLI and bench_kernels from BUILD, every shared library they load that is not glibc's,
# the driver's or CUDA's, Open MPI's plugins and launcher, and the scripts.
#
#   scripts/gpu-bundle.sh [BUILD=build] [OUT=.gpubundle]   ->  OUT/sluice-gpu-bundle.tar.xz
#
# Build first on any machine with nvcc (no GPU needed): `make build`.
set -euo pipefail
shopt -s nullglob

build=${1:-build}
out=${2:-.gpubundle}
[[ -d $build/tests ]] || { echo "gpu-bundle: $build has no tests: run 'make build' first" >&2; exit 1; }
[[ -x $build/bin/sluice ]] || echo "gpu-bundle: warning: $build/bin/sluice is not built; the bundle has no 'sluice env'" >&2

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/sluice-gpu
mkdir -p "$root/bin" "$root/tests" "$root/lib" "$root/scripts"

for b in sluice bench_kernels; do
  [[ -x $build/bin/$b ]] && cp "$build/bin/$b" "$root/bin/"
done
# The binaries of every test labelled gpu (ctest knows which).
mapfile -t gpu_tests < <(cd "$build" && ctest -L gpu -N -V 2>/dev/null |
  sed -n 's/^[0-9]*: Test command: \([^ ]*\).*/\1/p' | sort -u)
for t in "${gpu_tests[@]}"; do
  # MPI tests run through mpiexec: the binary is the last path-like argument.
  [[ $(basename "$t") == mpiexec || $(basename "$t") == mpirun ]] && continue
  [[ -x $t ]] && cp "$t" "$root/tests/"
done
for t in "$build"/tests/comm_nccl_test "$build"/tests/device_cuda_test; do
  [[ -x $t ]] && cp "$t" "$root/tests/"
done
cp scripts/gpu-check.sh scripts/gpu-env.sh "$root/scripts/"

# Shared libraries: everything ldd resolves except the C runtime, the driver and CUDA's own
# (the GPU machine's CUDA 13 must be used: its cuBLAS alone is larger than the bundle).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libgcc_s|libstdc\+\+|libcuda\.|libcudart|libcublas|libnccl|libnvidia|libcudnn|libnvrtc|libnvJitLink)'
for f in "$root"/bin/* "$root"/tests/*; do
  ldd "$f" | awk '/=> \//{print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip ]] && continue
    [[ -e $root/lib/$name ]] || cp -L "$path" "$root/lib/$name"
  done
done
# libcudart is small and carried so that the runtime matches the headers the build used.
for f in "$root"/bin/* "$root"/tests/*; do
  ldd "$f" | awk '/libcudart\.so/{print $3}'
done | sort -u | while read -r path; do [[ -n $path ]] && cp -L "$path" "$root/lib/"; done

# Open MPI (the NCCL test bootstraps through it): its plugins, help texts and launcher, laid out
# as under /usr so that gpu-check.sh can put them where Debian's build looks for them.
ompi=/usr/lib/x86_64-linux-gnu/openmpi
if [[ -d $ompi/lib/openmpi3 ]]; then
  mkdir -p "$root/ompi/usr/bin" "$root/ompi/usr/share" "$root/ompi$ompi/lib"
  cp -a "$ompi/lib/openmpi3" "$root/ompi$ompi/lib/"
  cp -a /usr/share/openmpi "$root/ompi/usr/share/" 2>/dev/null || true
  cp /usr/bin/orterun /usr/bin/orted "$root/ompi/usr/bin/"
  ln -s orterun "$root/ompi/usr/bin/mpirun"
  for f in "$root"/ompi/usr/bin/orte* "$root/ompi$ompi"/lib/openmpi3/*.so; do
    ldd "$f" 2>/dev/null | awk '/=> \//{print $1, $3}' | while read -r name path; do
      [[ $name =~ $skip ]] && continue
      [[ -e $root/lib/$name ]] || cp -L "$path" "$root/lib/$name"
    done
  done
fi

mkdir -p "$out"
# xz on every core: the bundle is built just before each GPU lease.
XZ_OPT="${XZ_OPT:--T0}" tar -C "$stage" -cJf "$out/sluice-gpu-bundle.tar.xz" sluice-gpu
echo "gpu-bundle: $out/sluice-gpu-bundle.tar.xz ($(du -h "$out/sluice-gpu-bundle.tar.xz" | cut -f1)):" \
  "$(ls "$root/tests" | wc -l) test binaries, $(ls "$root/lib" | wc -l) libraries"

#!/usr/bin/env bash
# Installs from Debian packages exactly what Sluice's build and tests need. Idempotent: a
# package already present is not touched, and apt is not called at all when nothing is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libgtest-dev libgmock-dev
  liburing-dev libhwloc-dev hwloc libtbb-dev libyaml-cpp-dev nlohmann-json3-dev
  libcli11-dev libfmt-dev libopenblas-openmp-dev libxxhash-dev
  libopenmpi-dev openmpi-bin
  fio e2fsprogs util-linux
  gnuplot-nox
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

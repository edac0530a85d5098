#!/usr/bin/env bash
# Installs the Debian 12 packages tessel needs to build, test and run, and nothing else.
# Only packages that are missing are installed. Without root it prints the exact apt-get line
# it would run and stops, so a person can run it themselves.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config ccache
  # clang's view of the public headers, for the test that every declared function is defined
  clang-15
  # libraries we use for what is not our field
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev libgtest-dev zlib1g-dev
  # cryptography: libsodium (encrypted files, keyed hashes), GMP (Paillier's big numbers)
  libsodium-dev libgmp-dev
  # the auto-tuner's database (tune/tune_db.h)
  libsqlite3-dev
  # OpenCL: headers, the ICD loader, and PoCL as the CPU OpenCL device
  opencl-headers ocl-icd-opencl-dev pocl-opencl-icd clinfo
  # MPI backend for collectives across machines
  openmpi-bin libopenmpi-dev
  # machines simulated on this one for the multi-machine tests (ip netns, veth, tc)
  iproute2
  # benchmark peers (linked only into benchmarks): oneDNN and OpenBLAS for the CPU, CLBlast (the
  # tuned OpenCL BLAS) for OpenCL, which the `tessel` command links for `tessel bench gemm`
  libdnnl-dev libopenblas-dev libclblast-dev
  # independent peer for the measured bandwidth and peak rates (tessel_hw_bench)
  likwid
  # data
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} system packages present"
  exit 0
fi

line="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "setup: missing system packages: ${missing[*]}" >&2
  echo "setup: tessel needs root to install them; run this as root, then try again:" >&2
  echo "  $line" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"

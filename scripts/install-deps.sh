#!/usr/bin/env bash
# Installs every build, test and run dependency of entrokv from Debian's
# packages. Idempotent: installs only what is missing. Needs root (or sudo).
# With --list, prints the packages, one a line, and installs nothing (for
# deploy/gpu-check.sh, which keeps no list of its own).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libcivetweb-dev openssl
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  python3 python3-numpy gnuplot-nox prometheus
  python3-grpcio python3-protobuf python3-pytest python3-setuptools python3-pip python3-yaml
)

if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# The GPU check of entrokv (docs/cuda.md): on a machine with an NVIDIA GPU,
# installs what the build needs, builds with the CUDA backend, runs the whole
# test suite (the CUDA tests included, which skip nowhere here), then the GPU
# benchmark, and prints the figures. A few minutes on a 16-core machine.
#
# Usage: deploy/gpu-check.sh [options]
#   --build-dir DIR   build folder (default: build-gpu-check in the repo)
#   --archs LIST      CUDA architectures (default: the GPU's own, e.g. 90;
#                     "80;90" when it cannot be read)
#   --jobs N          build parallelism (default: nproc)
#   --build-type T    CMake build type (default: Release)
#   --no-install      do not apt-get missing packages
#   --no-service      build core and its tests only (no gRPC service)
#   --quick-bench     benchmark 32k entries only
# Exit status: 0 when the build and every test passed (the benchmark's failure
# is reported but does not change it), 1 otherwise, 2 on an unknown option.

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR="$ROOT/build-gpu-check"
ARCHS=""
JOBS=$(nproc 2>/dev/null || echo 4)
INSTALL=1
SERVICE=ON
BUILD_TYPE=Release
BENCH_ARGS=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --archs) ARCHS=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --build-type) BUILD_TYPE=$2; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --no-service) SERVICE=OFF; shift ;;
    --quick-bench) BENCH_ARGS+=(--quick); shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
done

START=$(date +%s)
step() { printf '\n==== [%4ds] %s\n' "$(( $(date +%s) - START ))" "$*"; }

step "machine"
uname -srm
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap \
    --format=csv,noheader || nvidia-smi -L || true
else
  echo "gpu-check: nvidia-smi not found: no NVIDIA driver here; the CUDA tests" \
       "will skip and the benchmark will say so" >&2
fi

step "packages"
# The same packages as scripts/install-deps.sh, which the build and the
# tests below need (the service build needs civetweb, the Python tests
# grpcio and yaml, the deploy tests promtool).
mapfile -t PACKAGES < <("$ROOT/scripts/install-deps.sh" --list)
MISSING=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    MISSING+=("$p")
  fi
done
if [[ ${#MISSING[@]} -eq 0 ]]; then
  echo "all present"
elif [[ $INSTALL -eq 0 ]]; then
  echo "gpu-check: missing packages (--no-install given): ${MISSING[*]}" >&2
else
  echo "installing: ${MISSING[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  if ! { $SUDO apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
           --no-install-recommends "${MISSING[@]}"; }; then
    echo "gpu-check: apt-get failed; the build below may fail for want of:" \
         "${MISSING[*]}" >&2
  fi
fi

step "CUDA toolkit"
NVCC=""
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  NVCC=/usr/local/cuda/bin/nvcc
elif command -v nvcc >/dev/null 2>&1; then
  NVCC=$(command -v nvcc)
fi
if [[ -z "$NVCC" ]]; then
  echo "gpu-check: nvcc not found (install the CUDA toolkit, 12 or later, at" \
       "/usr/local/cuda); cannot build the CUDA backend" >&2
  exit 1
fi
"$NVCC" --version | tail -2
if [[ -z "$ARCHS" ]]; then
  CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
        head -1 | tr -d ' .')
  if [[ "$CAP" =~ ^[0-9]+$ ]]; then ARCHS=$CAP; else ARCHS="80;90"; fi
fi
echo "architectures: $ARCHS"

step "configure ($BUILD_DIR)"
LOG_DIR="$BUILD_DIR/gpu-check-logs"
mkdir -p "$LOG_DIR"
if ! cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DCMAKE_CUDA_COMPILER="$NVCC" \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
    -DENTROKV_ENABLE_CUDA=ON \
    -DENTROKV_BUILD_SERVICE="$SERVICE" \
    -DENTROKV_BUILD_TESTS=ON \
    -DENTROKV_BUILD_BENCH=OFF > "$LOG_DIR/configure.log" 2>&1; then
  tail -30 "$LOG_DIR/configure.log"
  echo "gpu-check: configure failed" >&2
  exit 1
fi
grep -E "entrokv: CUDA backend" "$LOG_DIR/configure.log"
if ! grep -q "entrokv: CUDA backend ON" "$LOG_DIR/configure.log"; then
  echo "gpu-check: CMake did not enable the CUDA backend" >&2
  exit 1
fi

step "build (-j$JOBS)"
if ! ninja -C "$BUILD_DIR" -j "$JOBS" > "$LOG_DIR/build.log" 2>&1; then
  grep -E "error|FAILED" "$LOG_DIR/build.log" | head -40
  echo "gpu-check: build failed (log: $LOG_DIR/build.log)" >&2
  exit 1
fi
echo "built"

step "tests (ctest -j$JOBS)"
TESTS_OK=1
if ! (cd "$BUILD_DIR" && ctest -j "$JOBS" --timeout 600 --output-on-failure \
        > "$LOG_DIR/ctest.log" 2>&1); then
  TESTS_OK=0
fi
grep -E "tests passed|tests failed|\(Failed\)|\*\*\*Timeout|Not Run" \
  "$LOG_DIR/ctest.log" | head -60
SKIPPED=$(grep -c "(Skipped)" "$LOG_DIR/ctest.log" || true)
echo "skipped tests: $SKIPPED (a machine with a working GPU should skip none" \
     "of the CUDA tests)"
echo "skipped CUDA tests: $(grep "(Skipped)" "$LOG_DIR/ctest.log" | grep -ci cuda)"

step "GPU benchmark"
BENCH="$BUILD_DIR/core/cuda/entrokv-bench-gpu"
if [[ -x "$BENCH" ]]; then
  "$BENCH" "${BENCH_ARGS[@]}" || echo "gpu-check: the benchmark failed" >&2
else
  echo "gpu-check: $BENCH was not built" >&2
fi

step "done"
if [[ $TESTS_OK -eq 1 ]]; then
  echo "gpu-check: PASS (build, tests; benchmark above)"
  exit 0
fi
echo "gpu-check: FAIL: some tests failed (log: $LOG_DIR/ctest.log)"
exit 1

#!/usr/bin/env bash
# The README's test command: installs what is missing, builds the project and
# its tests (CUDA code too where nvcc is present; its tests skip without a GPU)
# and runs the whole suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

build=${ENTROKV_BUILD_DIR:-build}
jobs=${ENTROKV_JOBS:-$(nproc)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DENTROKV_BUILD_TESTS=ON -DENTROKV_BUILD_BENCH=OFF
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600
tests/python/run.sh "$build"  # The Python client against the built server.

#!/usr/bin/env bash
# Builds the core, server and client test binaries with a sanitizer and runs
# them with CTest.
#
#   scripts/sanitize.sh asan   # AddressSanitizer + UndefinedBehaviorSanitizer, in build-asan
#   scripts/sanitize.sh tsan   # ThreadSanitizer, in build-tsan
#
# CUDA, benchmarks, the simulator and the tinyllama tests are left out; the
# fuzz corpus replay (tests/fuzz) is in. The Debian gRPC, protobuf and Abseil
# libraries are not instrumented: ASan still checks every access our code
# makes; TSan cannot see their synchronisation. For TSan, absl::Mutex and
# absl::Notification are made visible by tests/sanitizers/absl_tsan_shim.cc
# (preloaded), and tests/sanitizers/tsan.supp names the reports that come
# from inside the other uninstrumented libraries.
#
# Not part of scripts/test.sh; .ci/run runs the asan mode after it when CI's
# time allows (see README.md, "Reliability").
#
# Environment: ENTROKV_JOBS (default 2), ENTROKV_CTEST_ARGS (extra arguments
# for ctest, e.g. "-R Registry").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

mode=${1:-}
case "$mode" in
  asan)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
    ;;
  tsan)
    flags="-fsanitize=thread"
    ;;
  *)
    echo "usage: $0 asan|tsan" >&2
    exit 2
    ;;
esac
build=build-$mode
jobs=${ENTROKV_JOBS:-2}

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DENTROKV_BUILD_TESTS=ON -DENTROKV_BUILD_BENCH=OFF \
  -DENTROKV_ENABLE_CUDA=OFF -DENTROKV_BUILD_FUZZ=ON \
  -DCMAKE_CXX_FLAGS="$flags -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="$flags"

# The test binaries and the programs the tests start as processes.
targets=(
  entrokv_core_tests entrokv_backend_contract_test
  entrokv_server_tests entrokv_parse_reuse_test entrokv_server_client_tests
  entrokv_loadgen_tests
  entrokv_security_tests entrokv_flags_tests
  entrokv-server entrokv_loadgen
  entrokv_client_tests entrokv_client_alloc_test entrokv_minimal_engine
  entrokv_fuzz_replay
)
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
if [[ $mode == tsan ]]; then
  c++ -std=c++20 -shared -fPIC -O1 -o "$build/libabsl_tsan_shim.so" \
    tests/sanitizers/absl_tsan_shim.cc -ldl
  export LD_PRELOAD=$root/$build/libabsl_tsan_shim.so
fi

# Every report fails the test that caused it. Leak checking is on for ASan
# (gRPC's and protobuf's process-lifetime singletons are still reachable at
# exit, so LeakSanitizer does not report them).
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp}

# Only the folders whose binaries were built; the install/find_package test
# rebuilds the project without sanitizers and is left out, and so are the
# --help tests (they need entrokv-eval, of the tinyllama example).
status=0
for dir in core common server client fuzz; do
  # A test binary that is registered but missing from `targets` above shows
  # up as <name>_NOT_BUILT: name it rather than leave a bare "Not Run".
  if missing=$(ctest --test-dir "$build/tests/$dir" -N -LE install \
    -E 'HelpTest|help_tests' | grep -o '[A-Za-z0-9_]*_NOT_BUILT' | sort -u | grep .); then
    echo "sanitize.sh: add to its targets: ${missing//_NOT_BUILT/}" >&2
    status=1
  fi
  # shellcheck disable=SC2086  # ENTROKV_CTEST_ARGS is a list of arguments
  ctest --test-dir "$build/tests/$dir" --output-on-failure -j "$jobs" \
    --timeout 600 -LE install -E 'HelpTest|help_tests' ${ENTROKV_CTEST_ARGS:-} || status=1
done
if [[ $status -ne 0 ]]; then
  echo "sanitize.sh $mode: FAILED" >&2
else
  echo "sanitize.sh $mode: all tests passed"
fi
exit "$status"

#!/usr/bin/env bash
# Builds the wire fuzzer (tests/fuzz) with clang-14, libFuzzer, ASan and UBSan
# in build-fuzz and runs it for SECONDS (default 600).
#
#   scripts/fuzz.sh [SECONDS]
#
# Installs clang-14, libfuzzer-14-dev and libclang-rt-14-dev from Debian when
# clang++-14 or libFuzzer's library is missing.
# Only the project's code is instrumented (Debian's protobuf and Abseil are
# not). The working corpus grows in build-fuzz/corpus, seeded from
# tests/fuzz/corpus and tests/fuzz/regressions; crashing, leaking, slow or
# over-allocating inputs are kept in build-fuzz/crashers/. To keep one as a
# regression, copy it to tests/fuzz/regressions/ (ctest runs those, and the
# corpus, in a build with -DENTROKV_BUILD_FUZZ=ON).
#
# Environment: ENTROKV_FUZZ_MAX_LEN (bytes per input, default 4096),
# ENTROKV_FUZZ_WORKERS (parallel fuzzing processes, default 1),
# ENTROKV_JOBS (build jobs, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-600}
if ! [[ $seconds =~ ^[0-9]+$ ]] || [[ $seconds -lt 1 ]]; then
  echo "usage: $0 [SECONDS]" >&2
  exit 2
fi
build="build-fuzz"
jobs=${ENTROKV_JOBS:-2}
max_len=${ENTROKV_FUZZ_MAX_LEN:-4096}
workers=${ENTROKV_FUZZ_WORKERS:-1}

libfuzzer=$(find /usr/lib/llvm-14/lib/clang -name libclang_rt.fuzzer-x86_64.a \
  2>/dev/null | head -n 1 || true)
if ! command -v clang++-14 >/dev/null || [[ -z $libfuzzer ]]; then
  echo "fuzz.sh: installing clang-14, libfuzzer-14-dev and libclang-rt-14-dev" >&2
  sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
    clang-14 libfuzzer-14-dev libclang-rt-14-dev
fi

# fuzzer-no-link: coverage for libFuzzer in every object of ours; the fuzz
# target alone links libFuzzer itself (tests/fuzz/CMakeLists.txt).
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link $sanitize -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitize" \
  -DENTROKV_BUILD_TESTS=ON -DENTROKV_BUILD_FUZZ=ON \
  -DENTROKV_BUILD_BENCH=OFF -DENTROKV_ENABLE_CUDA=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target entrokv_fuzz_step \
  entrokv_fuzz_make_corpus entrokv_fuzz_replay

corpus=$build/corpus
crashers=$build/crashers
mkdir -p "$corpus" "$crashers"
# The generator's seeds are the checked-in ones; regenerating them picks up
# any change to the generator.
"$build/tests/fuzz/entrokv_fuzz_make_corpus" "$corpus" >/dev/null
inputs=("$corpus" tests/fuzz/corpus)
[[ -d tests/fuzz/regressions ]] && inputs+=(tests/fuzz/regressions)

# -malloc_limit_mb: one allocation past 256 MiB is a finding (the target's
# limits allow far less); -rss_limit_mb bounds the whole process.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
parallel=()
# -jobs sends each process's output to fuzz-N.log; one process writes here.
[[ $workers -gt 1 ]] && parallel=(-workers="$workers" -jobs="$workers")
before=$(find "$crashers" -type f | wc -l)
status=0
"$build/tests/fuzz/entrokv_fuzz_step" \
  -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
  -rss_limit_mb=2048 -malloc_limit_mb=256 \
  "${parallel[@]}" -print_final_stats=1 \
  -artifact_prefix="$crashers/" "${inputs[@]}" || status=$?
after=$(find "$crashers" -type f | wc -l)

echo "fuzz.sh: ran ${seconds}s; corpus $(find "$corpus" -type f | wc -l) inputs;" \
  "$((after - before)) new crashers in $crashers/"
if [[ $status -ne 0 || $after -gt $before ]]; then
  echo "fuzz.sh: FOUND a failure (libFuzzer exit $status). Replay one with:" >&2
  echo "  $build/tests/fuzz/entrokv_fuzz_replay $crashers/FILE" >&2
  exit 1
fi

#!/usr/bin/env bash
# Runs the Python client's tests against a real entrokv-server.
#   tests/python/run.sh [BUILD_DIR] [pytest args...]
# Skips cleanly (exit 0, with the reason) when the server binary is missing
# (ENTROKV_BUILD_SERVICE=OFF); fails when a Python package that
# scripts/install-deps.sh installs is missing. Tests whose dependency is
# optional (torch, the TinyStories data, the C++ reference libraries) are
# skipped by pytest, which prints why (-rs).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-${ENTROKV_BUILD_DIR:-build}}
shift || true
python=${ENTROKV_PYTHON:-/usr/bin/python3}
binary=${ENTROKV_SERVER_BINARY:-$build/server/entrokv-server}
if [ ! -x "$binary" ]; then
  echo "tests/python: skipped: no server binary at $binary"
  exit 0
fi
if ! "$python" -c "import grpc, google.protobuf, numpy, pytest, setuptools, pip" 2>/dev/null; then
  echo "tests/python: $python lacks grpc/protobuf/numpy/pytest/setuptools/pip:" \
       "run scripts/install-deps.sh" >&2
  exit 1
fi
export ENTROKV_SERVER_BINARY="$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")"
export ENTROKV_BUILD_DIR="$(cd "$build" && pwd)"
paths=(tests/python)
for arg in "$@"; do
  case "$arg" in tests/*) paths=() ;; esac
done
exec "$python" -m pytest -q -rs -p no:cacheprovider "${paths[@]}" "$@"

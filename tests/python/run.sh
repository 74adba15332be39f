#!/usr/bin/env bash
# Runs the Python client's tests against a real entrokv-server.
#   tests/python/run.sh [BUILD_DIR] [pytest args...]
# Skips cleanly (exit 0, with the reason) when the server binary or Debian's
# Python packages are missing.
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
if ! "$python" -c "import grpc, google.protobuf, numpy, pytest" 2>/dev/null; then
  echo "tests/python: skipped: $python lacks grpc/protobuf/numpy/pytest" \
       "(apt-get install python3-grpcio python3-protobuf python3-numpy python3-pytest)"
  exit 0
fi
export ENTROKV_SERVER_BINARY="$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")"
export ENTROKV_BUILD_DIR="$(cd "$build" && pwd)"
paths=(tests/python)
for arg in "$@"; do
  case "$arg" in tests/*) paths=() ;; esac
done
exec "$python" -m pytest -q -p no:cacheprovider "${paths[@]}" "$@"

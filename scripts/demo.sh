#!/usr/bin/env bash
# The README's main job: installs what is missing, builds the server and the
# load generator, starts entrokv-server on a unix socket, streams a synthetic
# workload through it (entrokv side by side with a bare gRPC echo of the same
# bytes), prints the report and stops the server.
#
# Extra arguments go to entrokv-loadgen, e.g. scripts/demo.sh --sessions 64.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

build=${ENTROKV_BUILD_DIR:-build-release}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DENTROKV_BUILD_TESTS=OFF -DENTROKV_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target entrokv-server entrokv_loadgen

run_dir=$(mktemp -d /tmp/entrokv-demo.XXXXXX)
socket="$run_dir/entrokv.sock"
# --enable_echo: the report compares Decode with the bare Echo RPC.
"$build/server/entrokv-server" --listen "unix:$socket" --log_level info \
  --enable_echo >"$run_dir/server.log" 2>&1 &
server_pid=$!
stop_server() {
  if kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"
    wait "$server_pid" || true
  fi
}
trap 'stop_server; rm -rf "$run_dir"' EXIT

for _ in $(seq 1 100); do
  [ -S "$socket" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$run_dir/server.log"; exit 1; }
  sleep 0.1
done
[ -S "$socket" ] || { echo "demo: the server did not start"; cat "$run_dir/server.log"; exit 1; }
echo "demo: entrokv-server is listening on unix:$socket"

"$build/tools/loadgen/entrokv-loadgen" --target "unix:$socket" \
  --sessions 8 --prefill 1024 --rounds 3 --steps_per_round 200 \
  --layers 4 --q_heads 8 --kv_heads 2 --head_dim 64 --dtype f16 \
  --policy entropy --budget 1024 "$@"

stop_server
echo "demo: server log (last lines):"
tail -n 5 "$run_dir/server.log"

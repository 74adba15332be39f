#!/usr/bin/env bash
# Starts the entrokv image as the README's run line does, then checks it:
#   1. the socket appears in the host directory mounted at /run/entrokv
#      (owned by uid 10001, mode 0660) and the server runs as uid 10001;
#   2. grpc.health.v1 answers SERVING over the unix socket (from the host)
#      and over TCP on the health port;
#   3. GET /metrics answers in Prometheus text format on the metrics port;
#   4. a short entrokv-loadgen run inside the container, over the socket,
#      exits 0;
#   5. SIGTERM drains the server and the container exits 0.
#
#   deploy/smoke-test.sh [IMAGE]          # default entrokv:VERSION
#
# Environment:
#   SERVER_ARGS   replace the image's CMD (e.g. to test an older server without
#                 --health_listen: SERVER_ARGS="--listen=unix:/run/entrokv/entrokv.sock,0.0.0.0:8081")
#   CHECK_METRICS 1 (default) / 0: skip step 3
#   HEALTH_PORT, METRICS_PORT  host ports (default 18081, 19464), on 127.0.0.1
#   ENTROKV_ENGINE, ENTROKV_STORAGE_DRIVER: see deploy/container-env.sh
# Needs /usr/bin/python3 with python3-grpcio for the health checks
# (deploy/grpc_health_check.py).
set -euo pipefail
cd "$(dirname "$0")/.."
ENTROKV_LOG_PREFIX=smoke-test
# shellcheck source=deploy/container-env.sh
source deploy/container-env.sh
entrokv_pick_engine

version=$(sed -n 's/^project(entrokv VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
image=${1:-entrokv:$version}
health_port=${HEALTH_PORT:-18081}
metrics_port=${METRICS_PORT:-19464}
python=/usr/bin/python3
[[ -x $python ]] || python=python3
name=entrokv-smoke-$$
step() { echo "smoke-test: $*"; }
fail() { echo "smoke-test: FAIL: $*"; "${ENGINE[@]}" logs "$name" 2>&1 | tail -n 30 | sed 's/^/  server| /'; exit 1; }

# The host directory for the socket must be writable by uid 10001 (the
# image's user), or the server cannot bind (EACCES). As root: chown. Rootless
# podman: chown inside podman's user namespace, where 10001 maps to a subuid.
run_dir=$(mktemp -d /tmp/entrokv-smoke.XXXXXX)
chmod 0770 "$run_dir"
if [[ $(id -u) -eq 0 ]]; then
  chown 10001:10001 "$run_dir"
elif [[ ${ENGINE[0]} == podman ]]; then
  podman unshare chown 10001:10001 "$run_dir"
else
  echo "smoke-test: run as root (or with rootless podman) so $run_dir can be given to uid 10001" >&2
  exit 1
fi

cleanup() {
  "${ENGINE[@]}" rm -f "$name" >/dev/null 2>&1 || true
  rm -rf "$run_dir"
}
trap cleanup EXIT

server_args=()
if [[ -n ${SERVER_ARGS:-} ]]; then
  read -r -a server_args <<<"$SERVER_ARGS"
fi
step "image $image, engine ${ENGINE[*]}"
step "run -v $run_dir:/run/entrokv -p 127.0.0.1:$health_port:8081 -p 127.0.0.1:$metrics_port:9464 $image ${server_args[*]}"
"${ENGINE[@]}" run -d --name "$name" \
  -v "$run_dir:/run/entrokv" \
  -p "127.0.0.1:$health_port:8081" -p "127.0.0.1:$metrics_port:9464" \
  "$image" "${server_args[@]}" >/dev/null

socket=$run_dir/entrokv.sock
for _ in $(seq 1 150); do
  [[ -S $socket ]] && break
  [[ $("${ENGINE[@]}" inspect -f '{{.State.Running}}' "$name" 2>/dev/null) == true ]] ||
    fail "the container exited before creating the socket"
  sleep 0.2
done
[[ -S $socket ]] || fail "no socket at $socket after 30 s"
step "socket $(stat -c '%n owner %u:%g mode %a' "$socket")"
# The image's default (--socket_mode 0660): the engine reaches the socket
# through its group, nobody else can. SERVER_ARGS may choose otherwise.
if [[ -z ${SERVER_ARGS:-} && $(stat -c '%u:%a' "$socket") != 10001:660 ]]; then
  fail "socket is $(stat -c '%u mode %a' "$socket"), want uid 10001 mode 660"
fi
uid=$("${ENGINE[@]}" exec "$name" id -u)
[[ $uid == 10001 ]] || fail "server runs as uid $uid, want 10001"
step "server runs as uid $uid"

health() {
  local target=$1 out
  for _ in $(seq 1 50); do
    if out=$("$python" deploy/grpc_health_check.py "$target" --timeout 2 2>&1); then
      step "$out"
      return 0
    fi
    sleep 0.2
  done
  fail "health check on $target: $out"
}
health "unix:$socket"
health "127.0.0.1:$health_port"

if [[ ${CHECK_METRICS:-1} == 1 ]]; then
  metrics=$("$python" - "$metrics_port" <<'EOF'
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/metrics"
for attempt in range(50):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            body = r.read().decode()
            print(f"GET {url}: {r.status} {r.headers.get('Content-Type')}, "
                  f"{sum(1 for l in body.splitlines() if l.startswith('# TYPE'))} metric families")
            sys.exit(0 if r.status == 200 and "# TYPE" in body else 1)
    except OSError as e:
        err = e
        time.sleep(0.2)
print(f"GET {url}: {err}")
sys.exit(1)
EOF
) || fail "metrics: $metrics"
  step "$metrics"
fi

step "entrokv-loadgen inside the container, over the socket:"
# Under set -e a failing pipeline would end the script here, without the
# FAIL line and the server's log: take its status by hand.
rc=0
"${ENGINE[@]}" exec "$name" entrokv-loadgen \
  --target=unix:/run/entrokv/entrokv.sock --mode=entrokv --sessions=4 \
  --prefill=256 --rounds=1 --steps_per_round=100 --budget=256 \
  --progress=false --fail_on_error 2>&1 | sed 's/^/  loadgen| /' ||
  rc=${PIPESTATUS[0]}
[[ $rc == 0 ]] || fail "entrokv-loadgen exited $rc"

step "SIGTERM"
start=$(date +%s.%N)
"${ENGINE[@]}" kill --signal TERM "$name" >/dev/null
code=$("${ENGINE[@]}" wait "$name")
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
"${ENGINE[@]}" logs "$name" 2>&1 | tail -n 4 | sed 's/^/  server| /'
[[ $code == 0 ]] || fail "container exited $code after SIGTERM"
step "container exited 0 after SIGTERM (${elapsed} s)"
step "PASS"

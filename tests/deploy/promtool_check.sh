#!/usr/bin/env bash
# The Prometheus side of deploy/: promtool checks the alert rules and runs
# their unit tests (tests/deploy/alerts_test.yml), then a live entrokv-server,
# after a short entrokv-loadgen run, is scraped and its /metrics text passes
# `promtool check metrics` with no finding, and every metric the rules and the
# Grafana dashboard query is in it. Exit 77 (ctest: skipped) without promtool
# (Debian: apt-get install prometheus).
# Usage: promtool_check.sh SOURCE_ROOT SERVER_BINARY LOADGEN_BINARY
set -euo pipefail
root=$1 server=$2 loadgen=$3
if ! command -v promtool >/dev/null; then
  echo "promtool_check: no promtool (apt-get install prometheus); skipped"
  exit 77
fi
python=/usr/bin/python3
[ -x "$python" ] || python=python3

promtool check rules "$root/deploy/prometheus/alerts.yml"
(cd "$root/tests/deploy" && promtool test rules alerts_test.yml)

dir=$(mktemp -d /tmp/entrokv-promtool.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
"$server" --listen="unix:$dir/s.sock" --metrics_listen=127.0.0.1:0 \
  --enable_echo --gpu=false >"$dir/server.log" 2>&1 &
pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|.*metrics http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$dir/server.log")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then cat "$dir/server.log"; echo "no metrics port"; exit 1; fi
"$loadgen" --target="unix:$dir/s.sock" --sessions=2 --rounds=1 \
  --steps_per_round=50 --progress=false --fail_on_error >/dev/null
"$python" -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$port/metrics').read().decode())" >"$dir/metrics.txt"
# promtool check metrics exits 0 with lint findings printed: require none.
findings=$(promtool check metrics <"$dir/metrics.txt" 2>&1) || { echo "$findings"; exit 1; }
if [ -n "$findings" ]; then echo "promtool check metrics:"; echo "$findings"; exit 1; fi
grep -q '^grpc_server_handled_total{.*grpc_method="Decode".*grpc_code="OK"} [1-9]' "$dir/metrics.txt" \
  || { echo "no Decode call counted"; exit 1; }
"$python" "$root/tests/deploy/check_queries.py" "$dir/metrics.txt" \
  "$root/deploy/prometheus/alerts.yml" "$root/deploy/grafana/entrokv-dashboard.json"
echo "promtool_check: rules, rule tests and live metrics clean"

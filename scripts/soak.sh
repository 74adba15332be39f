#!/usr/bin/env bash
# Soak test: 1,000 concurrent sessions against one entrokv-server on a unix
# socket (loopback only), the server's RSS sampled throughout, and a check
# that RSS returns to its pre-load level once the sessions close.
#
#   scripts/soak.sh [--duration SECONDS] [--sessions N] [--rate STEPS_PER_S]
#                   [--server BIN] [--loadgen BIN] [--out DIR]
#
# Phases: start the server; a warm-up (every session once, 5 steps), so that
# the one-time growth of holding N streams (gRPC threads, allocator
# fragments) is in the baseline; the pre-load RSS (mean of 3 samples); the
# load: entrokv-loadgen with N sessions (one thread and one
# Decode stream each, a small shape so that N fit), open loop at --rate steps/s
# in all, for --duration seconds, then it closes every session; alongside, a
# probe of 4 sessions runs back to back, 5 s each, for a p99 over time. After
# the close, RSS must come back within 10% of the pre-load level within 60 s.
#
# Writes DIR/rss.csv (t_s,rss_kib,phase), DIR/probe.csv (t_s,p50_us,p99_us,
# errors), DIR/load.json (the loadgen report) and DIR/server.log; prints a
# summary. Exits non-zero when RSS does not come back, when any step or
# session failed, or when the server died.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=600
sessions=1000
rate=1000
server_bin=build/server/entrokv-server
loadgen_bin=build/tools/loadgen/entrokv-loadgen
out=""
settle=60
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --sessions) sessions=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --server) server_bin=$2; shift 2 ;;
    --loadgen) loadgen_bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { print }' "$0"; exit 0 ;;
    *) echo "soak.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for n in "$duration" "$sessions" "$rate"; do
  if ! [[ $n =~ ^[0-9]+$ ]] || [[ $n -lt 1 ]]; then
    echo "soak.sh: --duration, --sessions and --rate take positive integers" >&2
    exit 2
  fi
done
for bin in "$server_bin" "$loadgen_bin"; do
  if [[ ! -x $bin ]]; then
    echo "soak.sh: $bin not found; build it (scripts/test.sh) or pass it" >&2
    exit 2
  fi
done
out=${out:-/tmp/entrokv-soak.$$}
mkdir -p "$out"
socket=/tmp/entrokv-soak.$$.sock
target=unix:$socket
py=/usr/bin/python3

server_pid=""
sampler_pid=""
probe_pid=""
load_pid=""
cleanup() {
  for pid in "$load_pid" "$probe_pid" "$sampler_pid" "$server_pid"; do
    if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; fi
  done
  if [[ -n $server_pid ]]; then wait "$server_pid" 2>/dev/null || true; fi
  rm -f "$socket"
}
trap cleanup EXIT

rss_kib() {
  awk '/^VmRSS:/ { print $2 }' "/proc/$server_pid/status" 2>/dev/null || echo 0
}
now_s() { echo $(($(date +%s) - start_s)); }

# One steps-per-session figure gives the wanted duration at the wanted rate:
# each session steps at rate/sessions per second.
steps=$((duration * rate / sessions))
if [[ $steps -lt 1 ]]; then
  echo "soak.sh: --rate too low for --duration: no step per session" >&2
  exit 2
fi
shape=(--layers=1 --kv_heads=1 --q_heads=2 --head_dim=32 --dtype=f16
  --policy=entropy --budget=64 --prefill=64 --prefill_chunk=64 --pool=16)

"$server_bin" --listen="$target" --gpu=false --log_level=warn \
  --max_sessions=$((sessions + 64)) --max_streams=$((sessions + 64)) \
  >"$out/server.log" 2>&1 &
server_pid=$!
start_s=$(date +%s)
for _ in $(seq 100); do
  [[ -S $socket ]] && break
  sleep 0.1
done
if [[ ! -S $socket ]]; then
  echo "soak.sh: the server did not start; see $out/server.log" >&2
  exit 1
fi

echo "t_s,rss_kib,phase" >"$out/rss.csv"
echo "load" >"$out/phase"
(
  while kill -0 "$server_pid" 2>/dev/null; do
    echo "$(now_s),$(rss_kib),$(cat "$out/phase")" >>"$out/rss.csv"
    sleep 2
  done
) &
sampler_pid=$!
echo "warmup" >"$out/phase"
start_rss=$(rss_kib)

probe() {  # One 5-second run of 4 sessions; prints its report.
  "$loadgen_bin" --target="$target" --mode=entrokv --client=sync \
    --sessions=4 --rate=40 --rounds=1 --steps_per_round=50 "${shape[@]}" \
    --progress=false --json 2>/dev/null
}
# The warm-up: every session once, a few steps each. Holding N streams for
# the first time grows gRPC's thread pools and leaves allocator fragments (a
# few MiB, once: later loads of the same size return to the same level), so
# the baseline is taken after it, once the server has trimmed its heap.
"$loadgen_bin" --target="$target" --mode=entrokv --client=sync \
  --sessions="$sessions" --rounds=1 --steps_per_round=5 "${shape[@]}" \
  --progress=false --json >"$out/warmup.json" 2>&1 || true
sleep 20
pre=0
for _ in 1 2 3; do
  pre=$((pre + $(rss_kib)))
  sleep 1
done
pre=$((pre / 3))

echo "load" >"$out/phase"
echo "soak.sh: $sessions sessions, $rate steps/s in all, ${duration}s;" \
  "pre-load RSS $((pre / 1024)) MiB; output in $out"
"$loadgen_bin" --target="$target" --mode=entrokv --client=sync \
  --sessions="$sessions" --rate="$rate" --rounds=1 --steps_per_round="$steps" \
  "${shape[@]}" --progress=false --json --fail_on_error \
  >"$out/load.json" 2>"$out/load.err" &
load_pid=$!
echo "t_s,p50_us,p99_us,errors" >"$out/probe.csv"
cat >"$out/probe.py" <<'EOF'
import json, sys
t = sys.argv[1]
try:
    m = json.load(sys.stdin)["modes"]["entrokv"]
except Exception:
    print(f"{t},,,1")
    sys.exit()
# Steps not answered OK: rejected, lost with a stream, not sent, fallbacks.
errors = m["failed"]
latency = m["latency_us"]
print(f"{t},{latency['p50']},{latency['p99']},{errors}")
EOF
(
  while kill -0 "$load_pid" 2>/dev/null; do
    t=$(now_s)
    probe | "$py" "$out/probe.py" "$t" >>"$out/probe.csv" || true
  done
) &
probe_pid=$!
load_status=0
wait "$load_pid" || load_status=$?
load_pid=""
wait "$probe_pid" || true
probe_pid=""
closed_s=$(now_s)

# The loadgen has closed its sessions; wait for RSS to come back.
echo "closed" >"$out/phase"
target_kib=$((pre * 110 / 100))
post=$(rss_kib)
back_s=""
for _ in $(seq $((settle / 2))); do
  post=$(rss_kib)
  if [[ $post -le $target_kib ]]; then
    back_s=$(($(now_s) - closed_s))
    break
  fi
  sleep 2
done
server_alive=1
kill -0 "$server_pid" 2>/dev/null || server_alive=0

"$py" - "$out" "$start_rss" "$pre" "$post" "${back_s:--1}" "$load_status" \
  "$server_alive" "$duration" "$sessions" "$rate" <<'EOF'
import csv, json, statistics, sys
out, start, pre, post, back, load_status, alive = sys.argv[1:8]
duration, sessions, rate = sys.argv[8:11]
start, pre, post, back = int(start), int(pre), int(post), int(back)
rows = list(csv.DictReader(open(f"{out}/rss.csv")))
peak = max(int(r["rss_kib"]) for r in rows if r["rss_kib"])
errors, lines = 0, []
try:
    load = json.load(open(f"{out}/load.json"))
    m = load["modes"]["entrokv"]
    errors += load["failures"]["failed_steps"]
    lines.append(f"load: {m['count']} steps, {m['steps_per_s']:.0f} steps/s, "
                 f"p50 {m['latency_us']['p50']:.0f} us, "
                 f"p99 {m['latency_us']['p99']:.0f} us, "
                 f"max {m['latency_us']['max']:.0f} us, status {m['status']}")
except Exception as e:
    errors += 1
    lines.append(f"load: no report ({e}); see {out}/load.err")
probe = [r for r in csv.DictReader(open(f"{out}/probe.csv"))]
p99 = [float(r["p99_us"]) for r in probe if r["p99_us"]]
errors += sum(int(r["errors"]) for r in probe)
if p99:
    third = max(1, len(p99) // 3)
    first, last = statistics.median(p99[:third]), statistics.median(p99[-third:])
    lines.append(f"probe p99 over time ({len(p99)} runs of 4 sessions): "
                 f"min {min(p99):.0f} us, median {statistics.median(p99):.0f} us, "
                 f"max {max(p99):.0f} us; first third {first:.0f} us, "
                 f"last third {last:.0f} us")
mib = lambda kib: f"{kib / 1024:.1f} MiB"
ok_rss = back >= 0
print(f"soak: {sessions} sessions, {rate} steps/s, {duration} s")
print(f"RSS: cold start {mib(start)}, pre-load (after the warm-up) {mib(pre)}, "
      f"peak {mib(peak)}, "
      f"post {mib(post)} "
      + (f"(within 10% of pre-load {back} s after the close)" if ok_rss
         else "(NOT within 10% of pre-load 60 s after the close)"))
for line in lines:
    print(line)
print(f"errors: {errors}; loadgen exit {load_status}; "
      f"server {'alive' if alive == '1' else 'DEAD'}")
ok = ok_rss and errors == 0 and load_status == "0" and alive == "1"
print("soak: PASS" if ok else "soak: FAIL")
sys.exit(0 if ok else 1)
EOF

#!/usr/bin/env bash
# entrokv-eval --tier against a live entrokv-server (the gRPC decider: server,
# wire and client library) reproduces the in-process run: every row of
# tier_runs.csv but its seconds (perplexity to 6 decimals, mean and peak live,
# evictions, demotions, promotions, bytes moved, host peak) is the same.
# Usage: tier_grpc.sh SERVER_BINARY EVAL_BINARY OUT_DIR
set -euo pipefail
server=$1 eval=$2 out=$3

dir=$(mktemp -d /tmp/entrokv-tier-grpc.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
"$server" --listen="unix:$dir/s.sock" --gpu=false >"$dir/server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  [ -S "$dir/s.sock" ] && break
  sleep 0.1
done
if [ ! -S "$dir/s.sock" ]; then cat "$dir/server.log"; echo "no server socket"; exit 1; fi

# One policy at one budget, the margin and the cap fixed (as
# entrokv_eval_tier_quick), on --quick's 8 + 8 stories.
flags=(--tier --quick --threads 2 --policies tova+fixed --tier_budgets 16
       --tier_margins 0 --tier_max_promotions 8 --progress=false)
rm -rf "$out"
"$eval" "${flags[@]}" --inprocess --out "$out/inprocess" >/dev/null
"$eval" "${flags[@]}" --server="unix:$dir/s.sock" --out "$out/grpc" \
  >"$out/grpc.log"
grep -q '^data .*decider grpc:unix:' "$out/grpc.log" \
  || { cat "$out/grpc.log"; echo "the run did not use the gRPC decider"; exit 1; }

# Without the last column (seconds per run).
strip() { cut -d, -f1-16 "$1"; }
if ! diff -u <(strip "$out/inprocess/tier_runs.csv") \
             <(strip "$out/grpc/tier_runs.csv"); then
  echo "tier_runs.csv differs between --inprocess (-) and --server (+)"
  exit 1
fi
# The tier run must have moved entries, or the comparison says little.
tier_rows=$(awk -F, 'NR > 1 && $2 > 0 && $13 > 0 && $14 > 0' \
  "$out/grpc/tier_runs.csv" | wc -l)
if [ "$tier_rows" -eq 0 ]; then
  cat "$out/grpc/tier_runs.csv"
  echo "no tier run with demotions and promotions"
  exit 1
fi
grep '^| tova+fixed (m=0 P=8) |' "$out/grpc/tier_report.md"
echo "tier_grpc: --server reproduces --inprocess ($(($(wc -l <"$out/grpc/tier_runs.csv") - 1)) runs)"

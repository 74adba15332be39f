#!/usr/bin/env bash
# The fault script for every client path: kill -9 the sidecar, restart it on
# the same socket after each outage length, and measure from the moment the
# new server answers health how long until the C++ client's single-stream
# sessions, the C++ client's DecodeBatch sessions and the Python client's
# (single and batched) are served again: the sessions that lived through the
# outage, one created during it (offline), and new ones
# (tests/fault/recovery_fault.py says exactly what each column measures).
#
#   scripts/fault-recovery.sh [--build DIR] [--outages 0.1,2,10] [--bound 1.0]
#                             [--out FILE]
#
# Prints a Markdown table (docs/engines.md, "Recovery after an outage");
# --out also writes it, headed by the commit and the command, to FILE.
# Exits 1 when a time passes --bound seconds or a session never came back.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
outages=0.1,2,10
bound=1.0
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --outages) outages=$2; shift 2 ;;
    --bound) bound=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { print }' "$0"; exit 0 ;;
    *) echo "fault-recovery.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
server=$build/server/entrokv-server
driver=$build/tests/fault/entrokv-fault-driver
for f in "$server" "$driver"; do
  if [[ ! -x $f ]]; then
    echo "fault-recovery.sh: $f is missing: build with -DENTROKV_BUILD_TESTS=ON" >&2
    exit 2
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for client in cpp python; do
  for mode in single batch; do
    d=$driver
    [[ $client == python ]] && d=python
    /usr/bin/python3 tests/fault/recovery_fault.py --server "$server" \
      --driver "$d" --mode "$mode" --outages "$outages" --bound "$bound" \
      --check --json "$tmp/$client-$mode.json" >&2 || status=1
  done
done

/usr/bin/python3 - "$tmp" <<'PY' > "$tmp/table.md"
import json, os, sys
rows = []
for name in ("cpp-single", "cpp-batch", "python-single", "python-batch"):
    path = os.path.join(sys.argv[1], name + ".json")
    if os.path.exists(path):
        rows += json.load(open(path))
label = {("c++", "single"): "C++ single-stream", ("c++", "batch"): "C++ DecodeBatch",
         ("python", "single"): "Python single-stream", ("python", "batch"): "Python DecodeBatch"}
ms = lambda v: "never" if v is None else f"{v * 1000:.0f} ms"
print("| client | outage | existing sessions | created offline | first new session | new sessions not served past the bound |")
print("|---|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {label[(r['client'], r['mode'])]} | {r['outage_s']:g} s | {ms(r['existing_s'])} "
          f"| {ms(r['born_s'])} | {ms(r['new_s'])} | {r['late_new']} |")
PY
cat "$tmp/table.md"
if [[ -n $out ]]; then
  {
    echo "# Recovery after an outage: scripts/fault-recovery.sh"
    echo
    echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- client server core proto tests/fault || echo ' (with uncommitted changes)'), $(date -u +%Y-%m-%d), $(nproc) cores"
    echo "command: scripts/fault-recovery.sh --outages $outages --bound $bound"
    echo "times from the new server's first SERVING health answer"
    echo
    cat "$tmp/table.md"
  } > "$out"
fi
exit $status

#!/usr/bin/env python3
"""Every metric that deploy/prometheus/alerts.yml and the Grafana dashboard
query exists in a live server's /metrics text (so a rename cannot leave them
querying nothing). Usage: check_queries.py METRICS_FILE ALERTS_YML DASHBOARD_JSON
"""
import json
import re
import sys

# Names Prometheus makes itself, not the server.
SYNTHETIC = {"up"}
NAME = re.compile(r"\b((?:entrokv|grpc_server|process)_[a-z0-9_]+|up)\b(?=\s*[{\[)])")


def exprs_of_dashboard(text):
    dash = json.loads(text)
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out.append(target["expr"])
    return out


def main():
    metrics_file, alerts, dashboard = sys.argv[1:4]
    samples = set()
    with open(metrics_file) as f:
        for line in f:
            # A declared family counts: entrokv_rejected_total has samples
            # only once something was rejected.
            if line.startswith("# TYPE "):
                family, kind = line.split()[2:4]
                samples.add(family)
                if kind == "histogram":
                    samples |= {family + s for s in ("_bucket", "_sum", "_count")}
                continue
            if line.startswith("#") or not line.strip():
                continue
            samples.add(re.split(r"[{ ]", line, 1)[0])
    exprs = []
    with open(alerts) as f:
        exprs.append(f.read())  # Names are found in the whole file.
    with open(dashboard) as f:
        exprs += exprs_of_dashboard(f.read())
    names = set()
    for expr in exprs:
        names |= set(NAME.findall(expr))
    missing = sorted(n for n in names - SYNTHETIC if n not in samples)
    if not names:
        print("no metric names found in the queries", file=sys.stderr)
        return 1
    if missing:
        print("queried but not exported: " + ", ".join(missing), file=sys.stderr)
        return 1
    print(f"check_queries: {len(names)} metric names, all exported")
    return 0


if __name__ == "__main__":
    sys.exit(main())

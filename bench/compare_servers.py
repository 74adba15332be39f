#!/usr/bin/env python3
"""Side-by-side entrokv-loadgen runs of server binaries or flag sets.

Every run starts a fresh server on a unix socket (with --enable_echo), runs
entrokv-loadgen --json against it (entrokv and echo phases interleaved, so
echo is the same run's transport baseline), and stops the server. Servers
alternate within each repetition, so a noisy machine spreads over all of
them. Prints one JSON line per run, then per case and server the medians:

  steps/s, p50 per step (per message with --batch), the same run's echo p50,
  server compute p50, service overhead ((p50 - compute) / echo p50), server
  CPU per step and outside compute (CPU less mean compute), context
  switches per step, echo's CPU and switches per message, cores busy
  with compute (steps/s x compute p50), and the load generator's own CPU
  per step (it shares the machine). The derived figures (overhead,
  outside compute, cores busy) are computed in each run and their medians
  printed, not computed from the other columns' medians.

Usage (docs/performance.md):
  bench/compare_servers.py --loadgen build/tools/loadgen/entrokv-loadgen \\
      --server before=/tmp/old/entrokv-server \\
      --server "after=build/server/entrokv-server --poll_threads=1" \\
      --cases 1s,8s,b64 --reps 3

To compare client libraries (the engine's side) instead, name several load
generators, NAME=PATH; every server then runs with each of them, and a row
is named SERVER+LOADGEN:
  bench/compare_servers.py --loadgen old=/tmp/old/entrokv-loadgen \\
      --loadgen new=build/tools/loadgen/entrokv-loadgen \\
      --server now=build/server/entrokv-server --cases b64 --reps 6
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {
    "1s": ["--sessions=1", "--rounds=3", "--steps_per_round=2000"],
    "8s": ["--sessions=8", "--rounds=3", "--steps_per_round=1000"],
    "b64": ["--sessions=64", "--batch=64", "--rounds=3",
            "--steps_per_round=100"],
}


def run_once(loadgen, command, case_flags, extra, directory):
    sock = os.path.join(directory, "s.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    server = subprocess.Popen(command + [f"--listen=unix:{sock}",
                                         "--enable_echo", "--log_level=warn"])
    try:
        for _ in range(200):
            if os.path.exists(sock) or server.poll() is not None:
                break
            time.sleep(0.05)
        out = subprocess.run([loadgen, f"--target=unix:{sock}",
                              "--prefill=1024", "--json"] + case_flags + extra,
                             capture_output=True, text=True)
    finally:
        server.terminate()
        server.wait()
    if out.returncode != 0:
        raise RuntimeError(f"loadgen exit {out.returncode}: {out.stderr[-400:]}")
    return row_of(json.loads(out.stdout))


def row_of(report):
    """One run's figures from entrokv-loadgen's --json report."""
    e, h = report["modes"]["entrokv"], report["modes"]["echo"]
    row = dict(steps_per_s=e["steps_per_s"], p50=e["latency_us"]["p50"],
               echo_p50=h["latency_us"]["p50"],
               compute_p50=e["server_compute_us"]["p50"],
               compute_mean=e["server_compute_us"]["mean"],
               cpu=e.get("server_cpu_us_per_step"),
               switches=e.get("context_switches_per_step"),
               echo_cpu=h.get("server_cpu_us_per_step"),
               echo_switches=h.get("context_switches_per_step"),
               loadgen_cpu=e.get("loadgen_cpu_us_per_step"))
    # The derived figures of this run, from this run's own figures: their
    # medians are what the summary prints (a product of two medians taken
    # over different runs is no run's figure).
    row["overhead"] = (row["p50"] - row["compute_p50"]) / row["echo_p50"]
    row["outside"] = (None if row["cpu"] is None
                      else row["cpu"] - row["compute_mean"])
    row["cores_busy"] = row["steps_per_s"] * row["compute_p50"] / 1e6
    return row


def median(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=1):
    return "n/a" if value is None else f"{value:.{digits}f}"


def summary(rows, cases, names):
    """The header and one line per case and server: the medians of rows."""
    lines = ["case server steps/s p50_us echo_p50_us compute_p50_us overhead "
             "cpu_us_per_step outside_compute_us switches_per_step "
             "echo_cpu_us echo_switches cores_busy loadgen_cpu_us"]
    for case in cases:
        for name in names:
            rs = [r for r in rows if r["server"] == name and r["case"] == case]
            sps, p50, echo = (median(rs, k) for k in
                              ("steps_per_s", "p50", "echo_p50"))
            compute, cpu = median(rs, "compute_p50"), median(rs, "cpu")
            lines.append(f"{case} {name} {sps:.0f} {p50:.1f} {echo:.1f} "
                         f"{compute:.1f} {median(rs, 'overhead'):.2f} "
                         f"{fmt(cpu)} {fmt(median(rs, 'outside'))} "
                         f"{fmt(median(rs, 'switches'), 2)} "
                         f"{fmt(median(rs, 'echo_cpu'))} "
                         f"{fmt(median(rs, 'echo_switches'), 2)} "
                         f"{median(rs, 'cores_busy'):.2f} "
                         f"{fmt(median(rs, 'loadgen_cpu'))}")
    return lines


def load_generators(specs):
    """(name, path) for each --loadgen: NAME=PATH, or one plain PATH."""
    if len(specs) == 1 and "=" not in specs[0]:
        return [("", specs[0])]
    named = []
    for spec in specs:
        name, _, path = spec.partition("=")
        if not name or not path:
            raise ValueError(f"--loadgen {spec!r}: expected NAME=PATH when "
                             "more than one is given")
        named.append((name, path))
    return named


def label(server, loadgen):
    """A row's name: the server's, and the load generator's when named."""
    return f"{server}+{loadgen}" if loadgen else server


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loadgen", action="append", required=True,
                        help="PATH, or NAME=PATH (repeatable)")
    parser.add_argument("--server", action="append", required=True,
                        help="NAME=COMMAND (the binary and its flags)")
    parser.add_argument("--cases", default="1s,8s,b64")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--loadgen_flag", action="append", default=[],
                        help="extra flag for every loadgen run")
    args = parser.parse_args()
    servers = []
    for spec in args.server:
        name, _, command = spec.partition("=")
        if not command:
            parser.error(f"--server {spec!r}: expected NAME=COMMAND")
        servers.append((name, shlex.split(command)))
    try:
        loadgens = load_generators(args.loadgen)
    except ValueError as error:
        parser.error(str(error))
    cases = args.cases.split(",")
    for case in cases:
        if case not in CASES:
            parser.error(f"unknown case {case!r}; known: {', '.join(CASES)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="entrokv-compare-") as directory:
        for rep in range(args.reps):
            for case in cases:
                for name, command in servers:
                    for loadgen, path in loadgens:
                        row = run_once(path, command, CASES[case],
                                       args.loadgen_flag, directory)
                        row.update(server=label(name, loadgen), case=case,
                                   rep=rep)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    print(f"\nmedians of {args.reps} runs")
    names = [label(name, loadgen) for name, _ in servers
             for loadgen, _ in loadgens]
    for line in summary(rows, cases, names):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

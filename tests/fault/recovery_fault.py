#!/usr/bin/python3
"""The fault script: a sidecar outage as a container restart makes it, and how
long the engine's sessions take to be served again.

For each outage length: start entrokv-server on a unix socket, start two
fault drivers (fault_driver.cc for C++, fault_driver.py for Python;
single-stream sessions or one DecodeBatch): one with long-lived sessions and
no probes, one with probes only, each its own process and channel; wait until
their sessions are online, kill -9 the
server, wait the outage, start a new server on the same socket and note when
it first answers a grpc.health.v1 check (a new channel per check, so no
client backoff delays it): that is "health answers", T_h. Then, measured
from T_h:

  existing  the slowest of the sessions created before the outage to have a
            step decided by the server again;
  born      the session created during the outage (offline) to have one;
  new       the first probe (a session created, stepped once and closed,
            every 100 ms) created after the first one the outage cost, to be
            online and have its step decided by the server (0 when it was
            created before T_h); and the count of probes created from
            T_h + bound on that were not ("late new").

  recovery_fault.py --server BUILD/server/entrokv-server
      --driver BUILD/tests/fault/entrokv-fault-driver | --driver python
      [--mode single|batch] [--outages 0.1,2,10] [--bound 1.0] [--check]
      [--json FILE]

With --check it exits 1 when a time exceeds --bound (seconds) or a session
never came back; without it, it only reports. The README's and
docs/engines.md's recovery table come from scripts/fault-recovery.sh, which
runs this for every driver and mode.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def health_serving(target: str) -> bool:
    """One grpc.health.v1 check on a new channel (50 ms at most)."""
    import grpc
    channel = grpc.insecure_channel(target)
    try:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        # HealthCheckResponse: field 1 (status), varint; SERVING = 1.
        answer = check(b"", timeout=0.05)
        return answer == b"\x08\x01"
    except grpc.RpcError:
        return False
    finally:
        channel.close()


class Server:
    def __init__(self, binary: str, socket: str) -> None:
        self.binary = binary
        self.socket = socket
        self.target = "unix:" + socket
        self.proc = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, f"--listen={self.target}", "--gpu=false",
             "--log_level=warn"], stdin=subprocess.DEVNULL)

    def wait_serving(self, timeout: float) -> float:
        """The time of the first SERVING answer."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if health_serving(self.target):
                return time.monotonic()
            time.sleep(0.005)
        raise RuntimeError(f"no SERVING from {self.target} in {timeout} s")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class Driver:
    """The driver process and the events it printed, as they came."""

    def __init__(self, command) -> None:
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.events = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                self.events.append(event)
                self.cond.notify_all()

    def wait_for(self, kind: str, timeout: float) -> dict:
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                for e in self.events:
                    if e["ev"] == kind:
                        return e
                left = end - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(f"the driver printed no '{kind}'")
                self.cond.wait(left)

    def finish(self) -> int:
        self.proc.stdin.close()
        rc = self.proc.wait(30)
        self.reader.join(5)
        return rc


def first_server_step(events, who: str, after: float):
    for e in events:
        if e["ev"] == "step" and e["who"] == who and e["server"] and e["t"] > after:
            return e["t"]
    return None


def summarise(rc, killed, serving, outage, bound, events) -> dict:
    sessions = sorted({e["who"] for e in events
                       if e["ev"] == "step" and not e["who"].startswith("probe")})
    existing = []
    born = None
    for who in sessions:
        t = first_server_step(events, who, killed)
        back = None if t is None else t - serving
        if who == "born":
            born = back
        else:
            existing.append(back)
    probes = [e for e in events if e["ev"] == "probe" and e["t"] > killed]
    # The probes created before the client noticed the outage still count
    # as served; "new" starts with the first that was not.
    lost = next((p["t"] for p in probes
                 if not (p["online"] and p["server"])), serving)
    served = [max(0.0, p["t"] - serving) for p in probes
              if p["t"] > lost and p["online"] and p["server"]]
    late = [p for p in probes
            if p["t"] >= serving + bound and not (p["online"] and p["server"])]
    end = next((e for e in events if e["ev"] == "end"), {})
    return {
        "outage_s": outage,
        "driver_exit": rc,
        "existing_s": None if None in existing or not existing else max(existing),
        "existing_all_s": existing,
        "born_s": born,
        "new_s": min(served) if served else None,
        "late_new": len(late),
        "probes_after_kill": len(probes),
        "recoveries": end.get("recoveries"),
        "attempts": end.get("attempts"),
    }


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--driver", required=True,
                        help="the C++ driver binary, or 'python'")
    parser.add_argument("--mode", default="single", choices=["single", "batch"])
    parser.add_argument("--outages", default="0.1,2,10")
    parser.add_argument("--bound", type=float, default=1.0)
    parser.add_argument("--watch", type=float, default=3.0,
                        help="seconds to watch after health answers")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv[1:])
    if args.driver == "python":
        command = [sys.executable, os.path.join(HERE, "fault_driver.py")]
        name = "python"
    else:
        command = [args.driver]
        name = "c++"
    command.append(f"--mode={args.mode}")
    rows = []
    failed = []
    for outage in (float(x) for x in args.outages.split(",")):
        row = run_one(args.server, command, outage, args.bound, args.watch)
        row.update(client=name, mode=args.mode)
        rows.append(row)
        print(format_row(row), flush=True)
        problems = check(row, args.bound)
        if problems:
            failed.append((outage, problems))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.check and failed:
        for outage, problems in failed:
            print(f"recovery_fault: outage {outage} s: {'; '.join(problems)}",
                  file=sys.stderr)
        return 1
    return 0


def run_one(server_binary, command, outage, bound, watch) -> dict:
    with tempfile.TemporaryDirectory(prefix="entrokv-fault-") as tmp:
        server = Server(server_binary, os.path.join(tmp, "entrokv.sock"))
        server.start()
        drivers = []
        try:
            server.wait_serving(10)
            target = f"--target={server.target}"
            # Two engines: one whose sessions live through the outage, and
            # one that only creates new sessions, so that nothing but its
            # own creations makes its channel reconnect.
            drivers = [Driver(command + [target, "--probe_every_ms=0"]),
                       Driver(command + [target, "--sessions=0"])]
            for driver in drivers:
                driver.wait_for("ready", 20)
            time.sleep(1.0)
            killed = time.monotonic()
            server.kill()
            time.sleep(outage)
            server.start()
            serving = server.wait_serving(10)
            time.sleep(watch)
            rc = max(driver.finish() for driver in drivers)
            events = drivers[0].events + drivers[1].events
            drivers = []
        finally:
            for driver in drivers:
                driver.proc.kill()
            server.stop()
    return summarise(rc, killed, serving, outage, bound, events)


def check(row, bound) -> list:
    problems = []
    if row["driver_exit"] != 0:
        problems.append(f"the driver exited {row['driver_exit']}")
    for what in ("existing_s", "born_s", "new_s"):
        v = row[what]
        if v is None:
            problems.append(f"{what[:-2]}: never served again")
        elif v > bound:
            problems.append(f"{what[:-2]}: {v:.3f} s after health answered")
    if row["late_new"]:
        problems.append(f"{row['late_new']} sessions created {bound} s or more "
                        "after health answered were not served")
    return problems


def format_row(row) -> str:
    def ms(v):
        return "never" if v is None else f"{v * 1000:.0f} ms"
    return (f"{row['client']:6} {row['mode']:6} outage {row['outage_s']:>5} s: "
            f"existing {ms(row['existing_s'])}, born offline {ms(row['born_s'])}, "
            f"new {ms(row['new_s'])}, late new {row['late_new']}, "
            f"recoveries {row['recoveries']} in {row['attempts']} attempts")


if __name__ == "__main__":
    sys.exit(main(sys.argv))

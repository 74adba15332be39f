#!/usr/bin/python3
"""The Python twin of fault_driver.cc: an engine that keeps decoding through a
sidecar outage, with the Python client. Same flags, same output (see
fault_driver.cc): one JSON object per line on stdout, times from
time.monotonic() (CLOCK_MONOTONIC).

  fault_driver.py --target=unix:/path.sock [--mode=single|batch]
                  [--sessions=4] [--step_every_ms=10] [--probe_every_ms=100]
                  [--duration_s=60]

The package is imported from the source tree, or as installed with
ENTROKV_PYTHON_INSTALLED=1 (tests/python/source_package.py).
"""

from __future__ import annotations

import json
import os
import select
import sys
import time

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _import_entrokv():
    sys.path.insert(0, os.path.join(REPO, "tests", "python"))
    import source_package  # noqa: E402
    source_package.prepare()
    import entrokv  # noqa: E402
    return entrokv


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


class Sequence:
    """One sequence: its session, the keys it appended (the engine's cache,
    for live_keys) and whether its last step was server-decided."""

    def __init__(self, entrokv, np, name: str) -> None:
        self.np = np
        self.name = name
        self.shape = entrokv.Shape(layers=2, kv_heads=2, q_heads=4, head_dim=8,
                                   element_type="f32")
        self.key_elements = 2 * 2 * 8
        self.queries = np.full(2 * 4 * 8, 0.25, np.float32)
        self.keys = {}
        self.next_slot = 0
        self.slot = 0
        self.server = None
        self.session = None

    def config(self, entrokv):
        c = entrokv.SessionConfig.for_policy("tova", budget=16, shape=self.shape)
        c.protection.sinks = 1
        return c

    def live_keys(self, slots):
        return self.np.stack([self.keys[s] for s in slots])

    def next(self):
        np = self.np
        self.slot = self.next_slot
        self.next_slot += 1
        e = np.arange(self.key_elements)
        key = (((self.slot * 7 + e * 3) % 11) * 0.125 - 0.5).astype(np.float32)
        self.keys[self.slot] = key
        return [self.slot], key, self.queries

    def settle(self, outcome) -> None:
        if not hasattr(outcome, "fallback"):  # An error.
            emit(ev="error", t=time.monotonic(), who=self.name,
                 status=str(getattr(outcome, "code", outcome)))
            self.keys.pop(self.slot, None)
            return
        for slot in outcome.evicted:
            self.keys.pop(slot, None)
        server = not outcome.fallback
        if self.server is None or self.server != server:
            emit(ev="step", t=time.monotonic(), who=self.name, server=server)
        self.server = server

    def online(self) -> bool:
        return self.session is not None and not self.session.degraded


def stdin_closed() -> bool:
    ready, _, _ = select.select([sys.stdin], [], [], 0)
    return bool(ready) and not os.read(sys.stdin.fileno(), 64)


def main(argv) -> int:
    flags = {"target": "", "mode": "single", "sessions": 4, "step_every_ms": 10,
             "probe_every_ms": 100, "duration_s": 60}
    for arg in argv[1:]:
        name, eq, value = arg[2:].partition("=")
        if not arg.startswith("--") or not eq or name not in flags:
            print(f"fault_driver.py: bad flag {arg}", file=sys.stderr)
            return 2
        if name in ("target", "mode"):
            flags[name] = value
        else:
            try:
                flags[name] = int(value)
                if flags[name] < (0 if name in ("sessions", "probe_every_ms") else 1):
                    raise ValueError(value)
            except ValueError:
                print(f"fault_driver.py: bad value {arg}", file=sys.stderr)
                return 2
    if not flags["target"] or flags["mode"] not in ("single", "batch"):
        print("fault_driver.py: --target and --mode=single|batch", file=sys.stderr)
        return 2

    entrokv = _import_entrokv()
    import numpy as np

    client = entrokv.Client(flags["target"])
    batched = flags["mode"] == "batch"
    batch = client.create_batch() if batched else None

    def create(seq: Sequence) -> None:
        maker = batch if batched else client
        seq.session = maker.create_session(seq.config(entrokv),
                                           live_keys=seq.live_keys)

    sequences = []
    for i in range(flags["sessions"]):
        seq = Sequence(entrokv, np, f"old{i}")
        create(seq)
        sequences.append(seq)
    ready = born = False
    every = flags["step_every_ms"] / 1000
    probe_every = flags["probe_every_ms"] / 1000
    end = time.monotonic() + flags["duration_s"]
    next_probe = time.monotonic()
    tick = time.monotonic()
    probes = 0
    while time.monotonic() < end:
        if stdin_closed():
            break
        time.sleep(max(0.0, tick - time.monotonic()))
        tick += every
        probe = None
        if ready and probe_every > 0 and time.monotonic() >= next_probe:
            next_probe = time.monotonic() + probe_every
            probe = Sequence(entrokv, np, f"probe{probes}")
            probes += 1
            probe_created = time.monotonic()
            create(probe)
            probe_online = probe.online()
        stepping = sequences + ([probe] if probe is not None else [])
        requests = [s.next() for s in stepping]
        if batched:
            outcomes = batch.step([entrokv.BatchStep(s.session, *r)
                                   for s, r in zip(stepping, requests)])
        else:
            outcomes = []
            for s, r in zip(stepping, requests):
                try:
                    outcomes.append(s.session.step(*r))
                except entrokv.EntroKvError as e:
                    outcomes.append(e)
        for s, o in zip(stepping, outcomes):
            if s is not probe:
                s.settle(o)
        if probe is not None:
            o = outcomes[-1]
            emit(ev="probe", t=probe_created, online=probe_online,
                 server=hasattr(o, "fallback") and not o.fallback)
            probe.session.close()
        if not ready:
            if all(s.online() for s in sequences):
                ready = True
                emit(ev="ready", t=time.monotonic())
        elif not born and sequences and not any(s.online() for s in sequences):
            born = True
            seq = Sequence(entrokv, np, "born")
            create(seq)
            sequences.append(seq)
    c = client.counters()
    emit(ev="end", t=time.monotonic(), recoveries=c.recoveries,
         attempts=c.recovery_attempts, steps=c.steps,
         offline_sessions=c.offline_sessions)
    for s in sequences:
        s.session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

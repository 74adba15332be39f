"""Recovery of a degraded session (session.h "Recovery"): against a scripted
Python server (fake_server.py) whose silences the test chooses, and against
the real entrokv-server stopped with SIGSTOP."""

from __future__ import annotations

import logging
import os
import tempfile
import time

import grpc
import numpy as np
import pytest

import entrokv
from entrokv import BatchStep, Shape

from conftest import Server
from fake_server import FakeServer

F32 = Shape(layers=1, kv_heads=1, q_heads=1, head_dim=4, element_type="f32")


def key(slot):
    """An entry's key: its slot id in every element (f32: exact on the wire)."""
    return np.full(4, float(slot), np.float32)


def query():
    return np.ones(4, np.float32)


class Engine:
    """The engine's KV cache as live_keys sees it: keys by slot id, and a
    record of every call."""

    def __init__(self, fail_first=0):
        self.calls = []
        self.fail_first = fail_first

    def live_keys(self, slots):
        self.calls.append(list(slots))
        if len(self.calls) <= self.fail_first:
            raise RuntimeError("the engine's cache is busy")
        return np.stack([key(s) for s in slots])


@pytest.fixture()
def fake():
    f = FakeServer()
    yield f
    f.stop()


def expected_keys(slots):
    return b"".join(key(s).tobytes() for s in slots)


def test_recovers_after_silence_resending_live_entries(fake):
    svc = fake.service
    engine = Engine()
    c = entrokv.Client(fake.target, step_deadline=0.3, create_deadline=1.0)
    s = c.create_session("window", budget=100, shape=F32,
                         live_keys=engine.live_keys, recovery_interval=0.05,
                         max_recovery_interval=0.4, recovery_jitter=0.0)
    assert s.id == "s1"
    for t in range(3):
        o = s.step([10 + t], key(10 + t), query(), pinned=[t == 1])
        assert not o.fallback
    svc.swallow.set()
    o = s.step([13], key(13), query())
    assert o.fallback and s.degraded
    assert s.degraded_reason.code == grpc.StatusCode.DEADLINE_EXCEEDED
    # Attempt 1: the server creates s2 but never answers its attach; the
    # attempt fails within create_deadline, s2 is closed, the step is local.
    time.sleep(0.1)
    start = time.monotonic()
    o = s.step([14], key(14), query())
    took = time.monotonic() - start
    assert o.fallback and s.degraded and 0.9 <= took < 3.0
    assert s.counters().recovery_attempts == 1 and s.counters().recoveries == 0
    assert svc.created == ["s1", "s2"]
    assert svc.wait_closed("s2")
    assert engine.calls == []  # The server failed first: no keys asked for.
    # Attempt 2 (after the doubled wait): the server answers again.
    svc.swallow.clear()
    time.sleep(0.25)
    o = s.step([15], key(15), query(), pinned=[False])
    assert not o.fallback and o.step == 5
    assert not s.degraded and s.degraded_reason is None and s.id == "s3"
    assert engine.calls == [[10, 11, 12, 13, 14]]
    resent = svc.steps[-1]
    assert resent.session_id == "s3" and resent.step == 5 and resent.answered
    assert resent.slot_ids == [10, 11, 12, 13, 14, 15]
    assert resent.pinned == [False, True, False, False, False, False]
    assert resent.keys == expected_keys([10, 11, 12, 13, 14, 15])
    assert svc.wait_closed("s1")  # The old server session.
    # Online: the next step sends only its own entry.
    o = s.step([16], key(16), query())
    assert not o.fallback
    last = svc.steps[-1]
    assert (last.session_id, last.step, last.slot_ids, last.pinned) == \
        ("s3", 6, [16], [])
    counters = s.counters()
    assert counters.recovery_attempts == 2 and counters.recoveries == 1
    assert counters.fallback_deadline == 1 and counters.fallback_degraded == 1
    assert counters.server_steps == 5 and counters.steps == 7
    assert c.counters().recoveries == 1
    s.close()
    assert "s3" in svc.closed
    c.close()


def test_no_live_keys_stays_local(fake, caplog):
    caplog.set_level(logging.INFO, logger="entrokv")
    c = entrokv.Client(fake.target, step_deadline=0.2, create_deadline=1.0)
    s = c.create_session("window", budget=100, shape=F32, recovery_interval=0.01)
    s.step([1], key(1), query())
    fake.service.swallow.set()
    assert s.step([2], key(2), query()).fallback
    fake.service.swallow.clear()
    time.sleep(0.05)
    for slot in range(3, 6):
        assert s.step([slot], key(slot), query()).fallback
    assert s.counters().recovery_attempts == 0
    assert fake.service.created == ["s1"]
    # The log says so, once.
    messages = [r.getMessage() for r in caplog.records if r.name == "entrokv"]
    assert len(messages) == 1, messages
    assert "lost the sidecar" in messages[0]
    assert "for the rest of its life (no live_keys callback)" in messages[0]
    assert caplog.records[0].levelno == logging.WARNING
    c.close()


def test_failing_live_keys_aborts_the_attempt(fake):
    svc = fake.service
    engine = Engine(fail_first=1)
    c = entrokv.Client(fake.target, step_deadline=0.2, create_deadline=1.0)
    s = c.create_session("window", budget=100, shape=F32,
                         live_keys=engine.live_keys, recovery_interval=0.02,
                         max_recovery_interval=0.04, recovery_jitter=0.0)
    s.step([1], key(1), query())
    svc.swallow.set()
    assert s.step([2], key(2), query()).fallback
    svc.swallow.clear()
    time.sleep(0.05)
    assert s.step([3], key(3), query()).fallback  # live_keys raised.
    assert svc.created == ["s1", "s2"] and svc.wait_closed("s2")
    assert s.counters().recovery_attempts == 1 and s.degraded
    time.sleep(0.1)
    o = s.step([4], key(4), query())
    assert not o.fallback and s.id == "s3"
    assert engine.calls == [[1, 2], [1, 2, 3]]
    assert svc.steps[-1].slot_ids == [1, 2, 3, 4]
    assert svc.steps[-1].keys == expected_keys([1, 2, 3, 4])
    c.close()


def test_offline_sessions_are_logged_once_per_period(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="entrokv")
    c = entrokv.Client("unix:" + str(tmp_path / "none.sock"), create_deadline=0.3)
    sessions = [c.create_session("window", budget=3, shape=F32) for _ in range(3)]
    assert all(s.offline for s in sessions)
    messages = [r.getMessage() for r in caplog.records if r.name == "entrokv"]
    assert len(messages) == 1, messages
    assert "created offline" in messages[0] and "UNAVAILABLE" in messages[0]
    assert "no live_keys" in messages[0]
    c.close()


def test_offline_session_recovers_when_the_server_comes(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="entrokv")
    path = str(tmp_path / "late.sock")
    engine = Engine()
    c = entrokv.Client("unix:" + path, step_deadline=0.2, create_deadline=0.3)
    s = c.create_session("window", budget=3, shape=F32,
                         live_keys=engine.live_keys, recovery_interval=0.05,
                         max_recovery_interval=0.2, recovery_jitter=0.1)
    assert s.offline and s.id == ""
    for slot in range(4):
        o = s.step([slot], key(slot), query())
        assert o.fallback
    # streaming keeps streaming_sinks (4 by default) first entries.
    assert s.live_slots() == [0, 1, 2, 3]
    fake = FakeServer(socket_path=path)
    try:
        slot, end = 4, time.monotonic() + 10
        while s.degraded and time.monotonic() < end:
            o = s.step([slot], key(slot), query())
            slot += 1
            time.sleep(0.02)
        assert not s.degraded and not s.offline and s.id == "s1"
        # Each local step evicted its own entry (the only one past the four
        # sinks, recent = 0): the live entries are the sinks, then the
        # recovering step's.
        assert slot >= 5
        sent = fake.service.steps[-1]
        assert sent.slot_ids == [0, 1, 2, 3, slot - 1]
        assert sent.keys == expected_keys([0, 1, 2, 3, slot - 1])
        assert engine.calls == [[0, 1, 2, 3]]
        assert s.counters().recoveries == 1 and s.counters().offline_sessions == 1
        assert fake.service.closed == []  # No old server session to close.
        messages = [r.getMessage() for r in caplog.records if r.name == "entrokv"]
        assert len(messages) == 2, messages
        assert "created offline" in messages[0] and "until it recovers" in messages[0]
        assert "decided by the sidecar again" in messages[1]
    finally:
        c.close()
        fake.stop()


@pytest.mark.parametrize("calls", ["batch", "own"])
def test_batch_sessions_recover_on_a_new_stream(fake, calls):
    """Stepped by DecodeBatch.step, or by each session's own calls, which
    the batch gathers into one message."""
    svc = fake.service
    engines = [Engine(), Engine()]
    c = entrokv.Client(fake.target, step_deadline=0.2, create_deadline=1.0)
    batch = c.create_batch()
    sessions = [batch.create_session("window", budget=100, shape=F32,
                                      live_keys=e.live_keys,
                                      recovery_interval=0.05, recovery_jitter=0)
                for e in engines]
    assert [x.id for x in sessions] == ["s1", "s2"]

    def step(slots):
        if calls == "batch":
            return batch.step([BatchStep(x, [sl], key(sl), query())
                               for x, sl in zip(sessions, slots)])
        for x, sl in zip(sessions, slots):
            x.step_async([sl], key(sl), query())
        return [x.collect() for x in sessions]

    assert not any(o.fallback for o in step([10, 20]))
    svc.swallow.set()
    assert all(o.fallback for o in step([11, 21]))
    assert all(x.degraded for x in sessions)
    svc.swallow.clear()
    time.sleep(0.1)
    out = step([12, 22])
    assert not any(o.fallback for o in out)
    assert [x.id for x in sessions] == ["s3", "s4"]
    assert engines[0].calls == [[10, 11]] and engines[1].calls == [[20, 21]]
    last = svc.steps[-2:]
    assert [(m.session_id, m.slot_ids) for m in last] == \
        [("s3", [10, 11, 12]), ("s4", [20, 21, 22])]
    assert svc.wait_closed("s1") and svc.wait_closed("s2")
    assert not any(o.fallback for o in step([13, 23]))
    c.close()


# --- Against the real server -----------------------------------------------------

SHAPE = Shape(layers=1, kv_heads=1, q_heads=1, head_dim=8, element_type="f16")


def real_key(slot):
    return np.full(8, 0.01 * (slot % 50), np.float32)


def test_recovers_after_a_stalled_server(own_server):
    c = entrokv.Client(own_server.target, step_deadline=0.2, create_deadline=2.0)
    asked = []

    def live_keys(slots):
        asked.append(list(slots))
        return np.stack([real_key(x) for x in slots])

    s = c.create_session("window", budget=4, shape=SHAPE, streaming_sinks=1,
                         live_keys=live_keys, recovery_interval=0.05,
                         recovery_jitter=0.0)
    old = s.id
    for t in range(6):
        assert not s.step([t], real_key(t), np.ones(8, np.float32)).fallback
    own_server.pause()
    try:
        assert s.step([6], real_key(6), np.ones(8, np.float32)).fallback
        assert s.degraded
    finally:
        own_server.resume()
    slot, end = 7, time.monotonic() + 10
    while s.degraded and time.monotonic() < end:
        o = s.step([slot], real_key(slot), np.ones(8, np.float32))
        slot += 1
    assert not s.degraded and s.id != old and not o.fallback
    assert len(asked) == 1
    # The server's new session holds what the client holds: the re-sent live
    # entries and the recovering step's, less the server's evictions.
    info = c.get_session(s.id)
    assert info.stats.live == len(s.live_slots()) == o.live == 4
    assert info.stats.appended == len(asked[0]) + 1
    # The old server session is closed in the background.
    end = time.monotonic() + 5
    while time.monotonic() < end:
        ids = [x.id for x in c.list_sessions()[0]]
        if old not in ids:
            break
        time.sleep(0.02)
    assert old not in ids and s.id in ids
    assert s.counters().recoveries == 1
    s.close()
    c.close()


def test_recovers_after_a_server_restart(own_server):
    """kill -9, then a new server on the same socket: the session that
    existed before comes back with its live entries, and a new session is
    served, both within a few seconds of the restart."""
    c = entrokv.Client(own_server.target, step_deadline=0.2, create_deadline=0.5)
    s = c.create_session("window", budget=4, shape=SHAPE, streaming_sinks=1,
                         live_keys=lambda slots: np.stack([real_key(x) for x in slots]),
                         recovery_interval=0.05, recovery_jitter=0.2)
    for t in range(3):
        assert not s.step([t], real_key(t), np.ones(8, np.float32)).fallback
    own_server.proc.kill()
    own_server.proc.wait()
    o = s.step([3], real_key(3), np.ones(8, np.float32))
    assert o.fallback and s.degraded
    restarted = Server(directory=own_server.dir)
    try:
        start = time.monotonic()
        slot = 4
        while s.degraded and time.monotonic() - start < 10:
            o = s.step([slot], real_key(slot), np.ones(8, np.float32))
            slot += 1
            time.sleep(0.005)
        existing = time.monotonic() - start
        assert not s.degraded and not o.fallback
        fresh = c.create_session("window", budget=4, shape=SHAPE)
        new = time.monotonic() - start
        assert not fresh.offline
        print(f"restart -> first server-decided step: existing session "
              f"{existing * 1000:.0f} ms, new session {new * 1000:.0f} ms")
        # As C++'s restart_test. (Without the client's poke in flight, grpcio
        # noticed the restarted server only at gRPC's 5 s backup poll.)
        assert existing < 2.0
        info = c.get_session(s.id)
        assert info.stats.live == len(s.live_slots()) == o.live
        assert s.counters().recoveries == 1
    finally:
        c.close()
        restarted.stop()


def test_new_sessions_are_served_soon_after_a_restart(own_tcp_server):
    """kill -9, an outage in which the engine keeps starting sequences
    (offline sessions, without live_keys: nothing is sent while the server is
    away), then a new server on the same socket: a new session is served
    within the reconnect backoff, not at gRPC's 5 s backup poll (as C++'s
    RestartTest.NewSessionsAreServedSoonAfterARestart). Over TCP, whose
    connects gRPC completes only while something polls the channel."""
    own_server = own_tcp_server
    c = entrokv.Client(own_server.target, step_deadline=0.2, create_deadline=0.5)
    try:
        s = c.create_session("window", budget=4, shape=SHAPE)
        assert not s.step([0], real_key(0), np.ones(8, np.float32)).fallback
        s.close()
        own_server.proc.kill()
        own_server.proc.wait()
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            s = c.create_session("window", budget=4, shape=SHAPE)
            assert s.offline
            s.close()
            time.sleep(0.02)
        restarted = Server(directory=own_server.dir,
                           tcp_port=own_server.tcp_port)
        try:
            start = time.monotonic()
            served = None
            while served is None and time.monotonic() - start < 10:
                s = c.create_session("window", budget=4, shape=SHAPE)
                if not s.step([1], real_key(1), np.ones(8, np.float32)).fallback:
                    served = time.monotonic() - start
                s.close()
                time.sleep(0.02)
            assert served is not None, "no session served 10 s after restart"
            print(f"kill -9, restart -> first served new session: "
                  f"{served * 1000:.0f} ms")
            assert served < 2.0
        finally:
            restarted.stop()
    finally:
        c.close()


def test_pipelined_session_recovers_settling_the_step_in_flight(fake):
    svc = fake.service
    engine = Engine()
    c = entrokv.Client(fake.target, step_deadline=0.2, create_deadline=1.0)
    s = c.create_session("window", budget=100, shape=F32,
                         live_keys=engine.live_keys, recovery_interval=0.05,
                         recovery_jitter=0.0)
    assert s.step_pipelined([0], key(0), query()) is None
    for t in (1, 2):
        assert not s.step_pipelined([t], key(t), query()).fallback
    end = time.monotonic() + 5  # Step 2 answered before the silence.
    while len(svc.steps) < 3 and time.monotonic() < end:
        time.sleep(0.001)
    svc.swallow.set()
    assert not s.step_pipelined([3], key(3), query()).fallback  # Step 2.
    o = s.step_pipelined([4], key(4), query())  # Collects step 3: silent.
    assert o.step == 3 and o.fallback and s.degraded
    svc.swallow.clear()
    time.sleep(0.1)
    # Step 4 is in flight on the dead stream: the recovery settles it
    # locally, then sends step 5 with the live entries.
    o = s.step_pipelined([5], key(5), query())
    assert o.step == 4 and o.fallback and not s.degraded
    assert engine.calls == [[0, 1, 2, 3, 4]]
    o = s.step_pipelined([6], key(6), query())
    assert o.step == 5 and not o.fallback
    fives = [m for m in svc.steps if m.step == 5]
    assert [(m.session_id, m.slot_ids) for m in fives] == \
        [("s2", [0, 1, 2, 3, 4, 5])]
    o = s.flush()
    assert o.step == 6 and not o.fallback
    counters = s.counters()
    assert counters.recoveries == 1 and counters.recovery_attempts == 1
    assert counters.fallback_deadline == 1 and counters.fallback_degraded == 1
    c.close()


def test_a_keydiff_session_sending_no_queries_recovers(fake):
    # keydiff reads no query, so its steps may leave them out; a degraded
    # keydiff session must still come back (as in C++).
    svc = fake.service
    engine = Engine()
    c = entrokv.Client(fake.target, step_deadline=0.3, create_deadline=1.0)
    s = c.create_session("keydiff", budget=100, shape=F32,
                         live_keys=engine.live_keys, recovery_interval=0.05,
                         recovery_jitter=0.0)
    assert not s.step([10], key(10)).fallback
    svc.swallow.set()
    o = s.step([11], key(11))
    assert o.fallback and s.degraded
    svc.swallow.clear()
    time.sleep(0.1)
    o = s.step([12], key(12))
    assert not o.fallback and not s.degraded and s.id == "s2"
    assert engine.calls == [[10, 11]]
    assert s.counters().recovery_attempts == 1 and s.counters().recoveries == 1
    s.close()
    c.close()


def test_a_batch_recovery_whose_first_step_fails_doubles_the_wait(fake):
    # As on a session's own stream (and in C++): the attach succeeds, the
    # step that re-sends the live entries misses its deadline, and the next
    # attempt waits twice as long.
    svc = fake.service
    engine = Engine()
    c = entrokv.Client(fake.target, step_deadline=0.2, create_deadline=1.0)
    batch = c.create_batch()
    s = batch.create_session("window", budget=100, shape=F32,
                             live_keys=engine.live_keys, recovery_interval=0.3,
                             max_recovery_interval=5.0, recovery_jitter=0.0)
    assert not s.step([10], key(10), query()).fallback
    svc.step_delay = 0.5  # Steps are answered past their deadline.
    assert s.step([11], key(11), query()).fallback and s.degraded
    time.sleep(0.35)
    assert s.step([12], key(12), query()).fallback and s.degraded
    assert (s.counters().recovery_attempts, s.counters().recoveries) == (1, 0)
    svc.step_delay = 0.0
    time.sleep(0.35)  # Within the doubled wait (0.6 s): no attempt.
    assert s.step([13], key(13), query()).fallback
    assert s.counters().recovery_attempts == 1
    time.sleep(0.35)
    assert not s.step([14], key(14), query()).fallback
    assert (s.counters().recovery_attempts, s.counters().recoveries) == (2, 1)
    s.close()
    c.close()

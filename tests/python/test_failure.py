"""The failure semantics: the per-step deadline against a stalled server
(SIGSTOP), the local streaming fallback that keeps the budget, counters by
cause, and offline sessions when the server is unreachable at creation."""

from __future__ import annotations

import tempfile
import time

import grpc
import numpy as np
import pytest

import entrokv
from entrokv import EntroKvError, Shape

SHAPE = Shape(layers=1, kv_heads=1, q_heads=1, head_dim=8, element_type="f16")


def k(t):
    return np.full(8, 0.1 * (t % 7), np.float32)


def q():
    return np.ones(8, np.float32)


def naive_streaming(live, budget, sinks, recent, next_index):
    """live: [(index, slot, pinned)] in append order -> evicted slots."""
    need = len(live) - budget
    out = []
    for index, slot, pinned in live:
        if need <= 0:
            break
        if pinned or index < sinks or index >= next_index - recent:
            continue
        out.append(slot)
        need -= 1
    return out


def test_deadline_fallback_against_stalled_server(own_server):
    c = entrokv.Client(own_server.target, step_deadline=0.2, create_deadline=5.0)
    s = c.create_session("window", budget=5, shape=SHAPE, streaming_sinks=2,
                         protection=entrokv.Protection(recent=1))
    for t in range(6):
        assert not s.step([t], k(t), q()).fallback
    assert s.live_slots() == [1, 2, 3, 4, 5]
    own_server.pause()
    try:
        start = time.monotonic()
        o = s.step([6], k(6), q())
        took = time.monotonic() - start
        assert o.fallback and 0.19 <= took < 2.0
        # streaming rule: sinks = max(protection.sinks, streaming_sinks) = 2.
        assert o.evicted == [2] and o.live == 5 and o.budget == 5
        assert s.degraded
        assert s.degraded_reason.code == grpc.StatusCode.DEADLINE_EXCEEDED
        o2 = s.step([7, 8], np.stack([k(7), k(8)]), q(), pinned=[True, False])
        assert o2.fallback and o2.evicted == [3, 4] and o2.live == 5
        assert o2.latency < 0.1  # Degraded: no waiting on the server.
    finally:
        own_server.resume()
    o3 = s.step([9], k(9), q())
    assert o3.fallback and o3.evicted == [5] and s.live_slots() == [1, 6, 7, 8, 9]
    cn = s.counters()
    assert (cn.fallback_deadline, cn.fallback_degraded, cn.fallback_unavailable) == (1, 2, 0)
    assert cn.fallback_steps == 3 and cn.server_steps == 6 and cn.steps == 9
    assert cn.evicted_by_fallback == 1 + 2 + len(o3.evicted)
    assert len(s.live_slots()) <= 5
    s.close()
    assert c.counters().fallback_deadline >= 1


def test_fallback_keeps_budget_like_cpp_rule():
    live = entrokv.LiveSet()
    rule = entrokv.StreamingRule(budget=4, sinks=1, recent=2, block_size=1)
    model = []
    rng = np.random.default_rng(3)
    slot = 0
    for step in range(40):
        n = int(rng.integers(0, 3))
        ids = list(range(slot, slot + n))
        pins = [bool(rng.random() < 0.1) for _ in ids]
        slot += n
        live.append(ids, pins)
        model += [(live.next_index - n + i, ids[i], pins[i]) for i in range(n)]
        ev = live.streaming_evictions(rule)
        assert ev == naive_streaming(model, 4, 1, 2, live.next_index)
        live.remove(ev)
        model = [m for m in model if m[1] not in ev]
        assert len(live) == len(model)


def test_fallback_blocks():
    live = entrokv.LiveSet()
    live.append(list(range(10)), [])
    rule = entrokv.StreamingRule(budget=4, sinks=0, recent=0, block_size=4)
    # Only full blocks [0..3], [4..7] are candidates; need = 6 -> 2 blocks.
    assert live.streaming_evictions(rule) == list(range(8))
    live.remove([5])
    assert live.streaming_evictions(rule) == [0, 1, 2, 3]


def test_offline_session_without_server():
    d = tempfile.mkdtemp()
    c = entrokv.Client(f"unix:{d}/absent.sock", step_deadline=0.05, create_deadline=0.3)
    start = time.monotonic()
    s = c.create_session("entropy", budget=3, shape=SHAPE, streaming_sinks=1)
    assert time.monotonic() - start < 2.0
    assert s.offline and s.degraded and s.id == ""
    assert s.degraded_reason.code == grpc.StatusCode.UNAVAILABLE
    assert s.degraded_reason.message.startswith("CreateSession: ")
    evicted = []
    for t in range(6):
        o = s.step([t], k(t), q(), entropy=1.0)
        assert o.fallback and o.live <= 3 and o.budget == 3
        evicted += o.evicted
    assert evicted == [1, 2, 3]  # The sink (0) and the 2 newest stay.
    # Validation still applies offline.
    with pytest.raises(EntroKvError) as e:
        s.step([10], k(10), q())
    assert e.value.message.startswith("entropy: policy affinity+entropy")
    cn = s.counters()
    assert cn.offline_sessions == 1 and cn.fallback_unavailable == 6
    assert cn.bytes_sent == 0 and cn.rejected_steps == 1
    start = time.monotonic()
    s.close()
    assert time.monotonic() - start < 0.1
    # Fail closed when asked.
    with pytest.raises(EntroKvError) as e:
        c.create_session("window", shape=SHAPE, offline_when_unavailable=False)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    # The caller's errors are raised even without a server.
    with pytest.raises(EntroKvError) as e:
        c.create_session("window", budget=-1)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert c.counters().offline_sessions == 1


def test_close_unconfirmed_when_server_stalls(own_server):
    c = entrokv.Client(own_server.target, step_deadline=0.2, create_deadline=5.0)
    s = c.create_session("window", budget=2, shape=SHAPE, create_deadline=0.3)
    assert not s.offline, s.degraded_reason
    own_server.pause()
    try:
        start = time.monotonic()
        s.close()
        assert time.monotonic() - start < 2.0
    finally:
        own_server.resume()
    assert s.counters().unconfirmed_closes == 1


def test_server_restart_midway_falls_back(own_server):
    c = entrokv.Client(own_server.target, step_deadline=1.0, create_deadline=5.0)
    s = c.create_session("window", budget=2, shape=SHAPE, streaming_sinks=0)
    s.step([0], k(0), q())
    own_server.proc.kill()
    own_server.proc.wait()
    o = s.step([1], k(1), q())
    assert o.fallback
    o = s.step([2], k(2), q())
    assert o.fallback and o.evicted == [0]
    cn = s.counters()
    assert cn.fallback_unavailable + cn.fallback_deadline == 1 and cn.fallback_degraded == 1

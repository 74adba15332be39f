"""DecodeBatch: the steps of many sessions in one message (batch.h)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

import entrokv
from entrokv import BatchStep, EntroKvError, Shape

SHAPE = Shape(layers=1, kv_heads=2, q_heads=4, head_dim=8, element_type="f16")


def k(n=1, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 16)).astype(np.float32)


def q(seed=0):
    return np.random.default_rng(100 + seed).standard_normal(32).astype(np.float32)


def test_batch_equals_single_sessions(client):
    batch = client.create_batch()
    policies = ["window", "streaming", "entropy"]
    members = [batch.create_session(p, budget=3, shape=SHAPE, streaming_sinks=1)
               for p in policies]
    singles = [client.create_session(p, budget=3, shape=SHAPE, streaming_sinks=1)
               for p in policies]
    before = client.counters().bytes_sent
    for t in range(12):
        h = 0.5 + (t % 5) * 0.3
        outs = batch.step([BatchStep(s, [t], k(1, t * 7 + i), q(t + i), entropy=h)
                           for i, s in enumerate(members)])
        for i, s in enumerate(singles):
            o = s.step([t], k(1, t * 7 + i), q(t + i), entropy=h)
            assert isinstance(outs[i], entrokv.StepOutcome), outs[i]
            assert (outs[i].evicted, outs[i].budget, outs[i].live) == (o.evicted, o.budget, o.live)
            assert not outs[i].fallback
    assert client.counters().bytes_sent > before
    with pytest.raises(EntroKvError) as e:
        members[0].step([99], k(), q())
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    for s in members + singles:
        s.close()


def test_batch_entries_fail_alone(client):
    batch = client.create_batch()
    a = batch.create_session("window", budget=2, shape=SHAPE)
    b = batch.create_session("window", budget=2, shape=SHAPE)
    other = client.create_session("window", budget=2, shape=SHAPE)
    bad = k()
    bad[0, 0] = np.nan  # Rejected by the server, for b only.
    outs = batch.step([BatchStep(a, [0], k(), q()), BatchStep(b, [0], bad, q()),
                       BatchStep(a, [1], k(), q()), BatchStep(other, [0], k(), q()),
                       BatchStep(b, [0], k(2), q())])
    assert isinstance(outs[0], entrokv.StepOutcome) and outs[0].step == 0
    assert isinstance(outs[1], EntroKvError) and "append.keys" in outs[1].message
    assert outs[2].message == "steps[2].session: appears twice in the batch"
    assert outs[3].message == "steps[3].session: not a session of this DecodeBatch"
    assert isinstance(outs[4], EntroKvError)  # b appears twice too.
    # b is unchanged: its next step takes number 0 again.
    outs = batch.step([BatchStep(b, [0], k(), q())])
    assert outs[0].step == 0 and not outs[0].fallback
    for s in (a, b, other):
        s.close()


def test_batch_deadline_degrades_every_member(own_server):
    c = entrokv.Client(own_server.target, step_deadline=0.2, create_deadline=5.0)
    batch = c.create_batch()
    members = [batch.create_session("window", budget=2, shape=SHAPE, streaming_sinks=0)
               for _ in range(3)]
    batch.step([BatchStep(s, [0], k(), q()) for s in members])
    own_server.pause()
    try:
        outs = batch.step([BatchStep(s, [1], k(), q()) for s in members])
        assert all(o.fallback for o in outs)
        outs = batch.step([BatchStep(s, [2, 3], k(2), q()) for s in members])
        assert all(o.fallback and o.evicted == [0, 1] for o in outs)
    finally:
        own_server.resume()
    assert all(s.degraded for s in members)
    cn = c.counters()
    assert (cn.fallback_deadline, cn.fallback_degraded) == (3, 3)


def test_batch_offline_member():
    c = entrokv.Client("unix:/nonexistent/entrokv.sock", create_deadline=0.3)
    batch = c.create_batch()
    s = batch.create_session("window", budget=1, shape=SHAPE, streaming_sinks=0)
    assert s.offline
    outs = batch.step([BatchStep(s, [0, 1], k(2), q())])
    assert outs[0].fallback and outs[0].evicted == [0]
    assert s.counters().fallback_unavailable == 1

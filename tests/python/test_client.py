"""Every public call of the Python client against a real server, and every
bad input's error (client-side messages are C++'s, naming the field)."""

from __future__ import annotations

import gc
import time

import grpc
import numpy as np
import pytest

import entrokv
from entrokv import EntroKvError, Shape

SHAPE = Shape(layers=2, kv_heads=2, q_heads=4, head_dim=8, element_type="f32")
KE = SHAPE.full_key_elements()  # 32
QE = SHAPE.full_query_elements()  # 64


def keys(n, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal((n, KE)).astype(dtype)


def queries(seed=0, dtype=np.float32):
    return np.random.default_rng(1000 + seed).standard_normal(QE).astype(dtype)


def run_window(session, steps, start=0):
    out = []
    for t in range(start, start + steps):
        out.append(session.step([t], keys(1, t), queries(t)))
    return out


def test_create_step_close_window(client):
    s = client.create_session("window", budget=4, shape=SHAPE)
    assert s.id and not s.offline and not s.degraded
    assert s.config.policy == "window+fixed" and s.config.placement == "cpu"
    outs = run_window(s, 10)
    assert [o.step for o in outs] == list(range(10))
    assert [o.evicted for o in outs] == [[]] * 4 + [[t] for t in range(6)]
    assert all(o.live == min(t + 1, 4) for t, o in enumerate(outs))
    assert all(o.budget == 4 and not o.fallback for o in outs)
    assert outs[-1].latency > 0 and outs[-1].server_compute >= 0
    assert s.live_slots() == [6, 7, 8, 9]
    assert s.next_step == 10
    c = s.counters()
    assert (c.steps, c.server_steps, c.evicted_by_server) == (10, 10, 6)
    assert c.bytes_sent > 0 and c.bytes_received > 0
    s.close()
    s.close()  # Idempotent.
    with pytest.raises(EntroKvError) as e:
        s.step([99], keys(1), queries())
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert client.counters().steps >= 10


def test_get_list_close_session(client):
    s = client.create_session("h2o", budget=3, shape=SHAPE, session_id="py-info-1")
    assert s.id == "py-info-1"
    run_window(s, 5)
    info = client.get_session("py-info-1")
    assert info.attached and info.stats.steps == 5 and info.stats.last_step == 4
    assert info.stats.live == 3 and info.stats.appended == 5
    assert info.config.ranking == "h2o" and info.config.budget == 3
    sessions, server = client.list_sessions()
    assert "py-info-1" in [x.id for x in sessions]
    assert server.sessions >= 1 and server.max_sessions > 0
    with pytest.raises(EntroKvError) as e:
        client.create_session("h2o", budget=3, shape=SHAPE, session_id="py-info-1")
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS
    closed = client.close_session("py-info-1")
    assert closed.id == "py-info-1"
    with pytest.raises(EntroKvError) as e:
        client.get_session("py-info-1")
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(EntroKvError) as e:
        client.close_session("py-info-1")
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    s.close()  # NOT_FOUND on close is success.


def test_pipelined_equals_blocking_shifted(client):
    a = client.create_session("window", budget=3, shape=SHAPE)
    b = client.create_session("window", budget=3, shape=SHAPE)
    blocking = [o.evicted for o in run_window(a, 8)]
    piped = []
    for t in range(8):
        o = b.step_pipelined([t], keys(1, t), queries(t))
        assert (o is None) == (t == 0)
        if o is not None:
            piped.append(o.evicted)
    assert b.in_flight == 1
    piped.append(b.flush().evicted)
    assert b.flush() is None
    assert piped == blocking
    # The halves.
    b.step_async([100], keys(1), queries())
    assert b.in_flight == 1
    assert b.collect().step == 8
    with pytest.raises(EntroKvError):
        b.collect()
    a.close()
    b.close()


def test_attach_after_stream_loss(client):
    s = client.create_session("window", budget=3, shape=SHAPE)
    run_window(s, 5)
    sid, live = s.id, s.live_slots()
    del s
    gc.collect()  # Ends the stream; the server session stays attachable.
    deadline = time.monotonic() + 5
    while True:
        try:
            r = client.attach(sid, live_slots=live)
            break
        except EntroKvError as e:
            if e.code != grpc.StatusCode.FAILED_PRECONDITION or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    assert r.next_step == 5 and r.live_slots() == live
    o = r.step([5], keys(1, 5), queries(5))
    assert o.step == 5 and o.evicted == [2] and not o.fallback
    with pytest.raises(EntroKvError) as e:
        client.attach("no-such-session")
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    r.close()


def test_element_types_and_conversions(client):
    # keynorm evicts the largest key norms: the order survives every wire type
    # and every input type (f32, f16, bf16 bit patterns).
    norms = [5.0, 1.0, 4.0, 2.0, 3.0, 0.5]
    base = np.ones(KE, np.float32) / np.sqrt(KE)
    ks = [base * n for n in norms]
    for wire in ("f32", "f16", "bf16"):
        for kind in ("f32", "f16", "bf16"):
            shape = Shape(layers=2, kv_heads=2, q_heads=4, head_dim=8, element_type=wire)
            s = client.create_session("keynorm", budget=3, shape=shape)
            evicted = []
            for t, k in enumerate(ks):
                if kind == "f32":
                    kk, qq = k, queries(t)
                elif kind == "f16":
                    kk, qq = k.astype(np.float16), queries(t, np.float16)
                else:
                    kk = entrokv.vectors.f32_to_bf16(k)
                    qq = entrokv.Bf16(entrokv.vectors.f32_to_bf16(queries(t)))
                evicted += s.step([t], kk, qq).evicted
            assert evicted == [0, 2, 4], (wire, kind)
            s.close()


def test_conversion_bits():
    x = np.array([1.0, -2.5, 3.14159, 65504.0, 1e-8, np.inf], np.float32)
    bf = entrokv.vectors.f32_to_bf16(x)
    assert bf.tolist() == [0x3F80, 0xC020, 0x4049, 0x4780, 0x322C, 0x7F80]
    assert entrokv.vectors.convert(bf, "bf16", "f32")[0] == 1.0
    h = entrokv.vectors.convert(x, "f32", "f16")
    assert h.dtype == np.float16 and float(h[1]) == -2.5


def test_logits_and_entropy(client):
    logits = np.array([2.0, 1.0, 0.5, -1.0], np.float32)
    expected = entrokv.entropy_of_logits(logits)
    p = np.exp(logits.astype(np.float64) - logits.max())
    p /= p.sum()
    assert expected == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-12)
    for on_client in (True, False):
        s = client.create_session("entropy", budget=4, shape=SHAPE,
                                  entropy_on_client=on_client)
        o = s.step([0], keys(1), queries(), logits=logits)
        assert o.entropy == pytest.approx(expected, rel=1e-9)
        o = s.step([1], keys(1, 1), queries(1), entropy=0.7)
        assert o.entropy == 0.7
        s.close()


def test_decide_every_sends_no_queries(client):
    s = client.create_session("entropy", budget=4, shape=SHAPE, decide_every=3)
    assert s.config.decide_every == 3
    outs = []
    sent = []
    for t in range(9):
        decides = s.next_step_decides(1)
        assert decides == ((t + 1) % 3 == 0)
        before = s.counters().bytes_sent
        if decides:
            o = s.step([t], keys(1, t), queries(t), entropy=1.0)
        else:
            o = s.step([t], keys(1, t))  # No queries, no entropy.
        sent.append(s.counters().bytes_sent - before)
        outs.append(o)
    assert [o.deferred for o in outs] == [t % 3 != 2 for t in range(9)]
    assert all(not o.evicted for o in outs if o.deferred)
    assert sent[0] < sent[2]  # Deferred steps carry no queries.
    s.step([9], keys(1, 9))
    s.step([10], keys(1, 10))
    assert s.next_step_decides(1)
    with pytest.raises(EntroKvError) as e:
        s.step([11], keys(1, 11))
    assert e.value.message == ("queries: 0 elements, expected 64 "
                               "(layers x q_heads x head_dim) on a decision step")
    s.close()


def test_hand_over_torch_tensors(client):
    torch = pytest.importorskip("torch")
    s = client.create_session("window", budget=2, shape=SHAPE)
    for t in range(4):
        o = s.step(torch.tensor([t]), torch.from_numpy(keys(1, t)).to(torch.bfloat16),
                   torch.from_numpy(queries(t)).half())
    assert o.evicted == [1]
    s.close()


# --- Bad inputs ----------------------------------------------------------------


def expect_invalid(fn, message):
    with pytest.raises(EntroKvError) as e:
        fn()
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT, e.value
    assert e.value.message.startswith(message), e.value.message
    return e.value


def test_bad_step_inputs(client):
    s = client.create_session("entropy", budget=4, shape=SHAPE)
    k, q = keys(1), queries()
    expect_invalid(lambda: s.step([0], keys(2), q, entropy=1.0),
                   "append.keys: 64 elements, expected 1 entries x 32 "
                   "(layers x kv_heads x head_dim)")
    expect_invalid(lambda: s.step([0], k, q[:10], entropy=1.0),
                   "queries: 10 elements, expected 64 (layers x q_heads x head_dim)")
    expect_invalid(lambda: s.step([0, 0], keys(2), q, entropy=1.0),
                   "append.slot_ids: slot 0 appears twice")
    expect_invalid(lambda: s.step([0], k, q, entropy=1.0, pinned=[True, False]),
                   "append.pinned: 2 flags for 1 slot ids")
    expect_invalid(lambda: s.step([0], k, q, entropy=1.0, logits=[1.0, 2.0]),
                   "entropy: give the entropy or the logits, not both")
    expect_invalid(lambda: s.step([0], k, q, entropy=float("nan")),
                   "entropy: not finite")
    expect_invalid(lambda: s.step([0], k, q, entropy=-0.5),
                   "entropy: -0.5 is negative")
    expect_invalid(lambda: s.step([0], k, q),
                   "entropy: policy affinity+entropy reads the entropy; "
                   "give it or the logits")
    expect_invalid(lambda: s.step([0], k, q, logits=[1.0, float("inf")]),
                   "logits: logits: non-finite value at index 1")
    expect_invalid(lambda: s.step([0], k.astype(np.int32), q, entropy=1.0),
                   "append.keys: unsupported dtype int32")
    expect_invalid(lambda: s.step([-1], k, q, entropy=1.0),
                   "append.slot_ids: slot -1 is outside [0, 2^64)")
    assert s.counters().rejected_steps == 11
    assert s.next_step == 0 and s.live_slots() == []
    s.step([0], k, q, entropy=1.0)
    expect_invalid(lambda: s.step([0], k, q, entropy=1.0),
                   "append.slot_ids: slot 0 is already live")
    # Rejected by the server: the session is unchanged, the number reused.
    bad = keys(1, 1)
    bad[0, 3] = np.nan
    e = expect_invalid(lambda: s.step([1], bad, q, entropy=1.0), "steps[0].append.keys")
    assert "append.keys" in e.message
    assert s.next_step == 1 and s.live_slots() == [0]
    assert s.step([1], keys(1, 1), q, entropy=1.0).step == 1
    s.close()


def test_bad_configs(client):
    expect_invalid(lambda: client.create_session("window", shape=Shape(kv_heads=4, q_heads=6)),
                   "shape.q_heads: 6 is not a multiple of shape.kv_heads 4")
    expect_invalid(lambda: client.create_session("window", budget=0),
                   "budget: 0 is outside [1, 2^40]")
    expect_invalid(lambda: client.create_session("nope"), 'policy: unknown policy "nope"')
    expect_invalid(lambda: client.create_session("window", shape=Shape(head_dim=8, sketch_dim=9)),
                   "shape.sketch_dim: 9 is outside [0, head_dim 8] (0: exact)")
    expect_invalid(lambda: client.create_session("tova", shape=Shape(query_form="group_sum")),
                   "shape.query_form: group_sum queries give no per-head attention, "
                   "which ranking tova needs")
    expect_invalid(lambda: client.create_session("window", decide_every=0),
                   "decide_every: 0 is outside [1, 65536]")
    expect_invalid(lambda: client.create_session("entropy", affinity=entrokv.AffinityParams(lambda_=2.0)),
                   "affinity.lambda: 2 is outside [0, 1]")
    for v in (99, (1 << 40) + 1):  # 0 or [budget, 2^40], either side.
        expect_invalid(lambda: client.create_session("window", budget=100, hard_ceiling=v),
                       f"hard_ceiling: {v} is outside [budget 100, 2^40]")
        expect_invalid(lambda: client.create_session(
            "entropy", budget=100, entropy_budget=entrokv.EntropyBudgetParams(max_budget=v)),
                       f"entropy_budget.max_budget: {v} is outside [budget 100, 2^40]")
    expect_invalid(lambda: client.create_session("window", shape=Shape(head_dim=8, sketch_dim=2),
                                                 projection=np.zeros(3, np.float32)),
                   "projection: 3 elements, expected 1 (layers x kv heads) x 8 x 2")
    with pytest.raises(EntroKvError) as e:
        client.create_session("window", placement="gpu")  # No GPU in these tests.
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(EntroKvError):
        entrokv.Client("")


def test_environment_defaults(monkeypatch, server):
    monkeypatch.setenv("ENTROKV_TARGET", server.target)
    monkeypatch.setenv("ENTROKV_STEP_DEADLINE_MS", "250")
    c = entrokv.Client()
    assert c.target == server.target and c.step_deadline == 0.25
    s = c.create_session("window", budget=2, shape=SHAPE, create_deadline=5.0)
    assert not s.offline
    s.close()
    monkeypatch.setenv("ENTROKV_STEP_DEADLINE_MS", "soon")
    with pytest.raises(EntroKvError):
        entrokv.Client()

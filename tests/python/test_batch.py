"""DecodeBatch: the steps of many sessions in one message (batch.h)."""

from __future__ import annotations

import threading
import time
import urllib.request

import grpc
import numpy as np
import pytest

import entrokv
from entrokv import BatchStep, EntroKvError, Shape

from conftest import Server, free_tcp_port
from fake_server import FakeServer

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


# -- The per-session calls, gathered into one message per iteration ----------


class MetricsServer(Server):
    """A server whose /metrics counts the Decode messages it received."""

    def __init__(self):
        self.metrics_port = free_tcp_port()
        super().__init__(
            extra_flags=[f"--metrics_listen=127.0.0.1:{self.metrics_port}"])

    def wait_for_messages(self, count: int, timeout: float = 5.0) -> int:
        """The Decode messages received, once `count` or `timeout` passed."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.decode_messages()
            if got >= count or time.monotonic() > deadline:
                return got
            time.sleep(0.01)

    def decode_messages(self) -> int:
        return self.metric_sum("grpc_server_msg_received_total",
                               'grpc_method="Decode"')

    def metric_sum(self, name: str, label: str = "") -> int:
        """The sum of a counter's series (those with `label` in theirs)."""
        text = urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        total = 0
        for line in text.splitlines():
            if ((line.startswith(name + "{") or line.startswith(name + " "))
                    and label in line):
                total += int(float(line.rsplit(" ", 1)[1]))
        return total


@pytest.fixture()
def metrics_server():
    s = MetricsServer()
    yield s
    s.stop()


def single_outcomes(client, policies, steps):
    """Each policy's outcomes on a session of its own (the reference)."""
    out = []
    for p in policies:
        s = client.create_session(p, budget=3, shape=SHAPE, streaming_sinks=1)
        out.append([s.step(*st) for st in steps])
        s.close()
    return out


def steps_of(i, rounds):
    return [([t], k(1, t * 7 + i), q(t + i), 0.5 + (t % 5) * 0.3)
            for t in range(rounds)]


def same(a, b):
    return (a.evicted, a.budget, a.live, a.fallback) == (b.evicted, b.budget, b.live, b.fallback)


def test_own_steps_are_gathered_into_one_message_per_iteration(metrics_server):
    c = entrokv.Client(metrics_server.target, step_deadline=5.0, create_deadline=5.0)
    policies = ["window", "streaming", "entropy"]
    rounds = 10
    expected = [single_outcomes(c, [p], steps_of(i, rounds))[0]
                for i, p in enumerate(policies)]
    batch = c.create_batch()
    members = [batch.create_session(p, budget=3, shape=SHAPE, streaming_sinks=1)
               for p in policies]
    before = metrics_server.decode_messages()
    for t in range(rounds):
        for i, s in enumerate(members):
            s.step_async(*steps_of(i, rounds)[t])
        # Sent as the last session gathered, before any collect().
        assert metrics_server.wait_for_messages(before + t + 1) == before + t + 1
        got = [s.collect() for s in members]
        for i in range(len(members)):
            assert same(got[i], expected[i][t]), (t, i, got[i], expected[i][t])
    # One message per iteration: sent when the last session gathered.
    assert metrics_server.decode_messages() - before == rounds
    for s in members:
        s.close()
    c.close()


def test_a_step_that_needs_its_answer_sends_what_is_gathered(metrics_server):
    c = entrokv.Client(metrics_server.target, step_deadline=5.0, create_deadline=5.0)
    rounds = 6
    expected = [single_outcomes(c, ["window"], steps_of(i, rounds))[0] for i in range(2)]
    batch = c.create_batch()
    a, b = [batch.create_session("window", budget=3, shape=SHAPE, streaming_sinks=1)
            for _ in range(2)]
    before = metrics_server.decode_messages()
    # Session.step on one member alone: its step cannot wait for b's.
    for t in range(rounds):
        assert same(a.step(*steps_of(0, rounds)[t]), expected[0][t])
    assert metrics_server.decode_messages() - before == rounds
    # b catches up with pipelined steps: each one sends the message its
    # previous step was gathered into, and flush() the last.
    got = []
    for t in range(rounds):
        o = b.step_pipelined(*steps_of(1, rounds)[t])
        if o is not None:
            got.append(o)
    got.append(b.flush())
    assert all(same(g, e) for g, e in zip(got, expected[1])) and len(got) == rounds
    assert metrics_server.decode_messages() - before == 2 * rounds
    for s in (a, b):
        s.close()
    c.close()


def test_step_sends_gathered_steps_first_and_a_close_leaves_the_message(metrics_server):
    c = entrokv.Client(metrics_server.target, step_deadline=5.0, create_deadline=5.0)
    batch = c.create_batch()
    a, b, gone = [batch.create_session("window", budget=3, shape=SHAPE,
                                       streaming_sinks=1) for _ in range(3)]
    before = metrics_server.decode_messages()
    # DecodeBatch.step sends the gathered steps first, in their own message.
    a.step_async([0], k(), q(), 1.0)
    outs = batch.step([BatchStep(b, [0], k(), q(), entropy=1.0),
                       BatchStep(gone, [0], k(), q(), entropy=1.0)])
    assert [o.step for o in outs] == [0, 0] and not any(o.fallback for o in outs)
    assert a.collect().step == 0
    assert metrics_server.decode_messages() - before == 2
    # A member that closes takes its gathered step out of the message: the
    # server never sees it (it would reject a step of a closed session).
    rejected = metrics_server.metric_sum("entrokv_rejected_total")
    gone.step_async([1], k(), q(), 1.0)
    a.step_async([1], k(), q(), 1.0)
    time.sleep(0.2)
    assert metrics_server.decode_messages() - before == 2  # b has not gathered.
    gone.close()
    b.step_async([1], k(), q(), 1.0)  # Complete: a and b, the open ones.
    assert metrics_server.wait_for_messages(before + 3) == before + 3
    oa, ob = a.collect(), b.collect()
    assert (oa.step, ob.step) == (1, 1) and not oa.fallback and not ob.fallback
    # A member that closes before it gathered completes the others' message.
    a.step_async([2], k(), q(), 1.0)
    time.sleep(0.2)
    assert metrics_server.decode_messages() - before == 3
    b.close()
    assert metrics_server.wait_for_messages(before + 4) == before + 4
    assert a.collect().step == 2
    assert metrics_server.metric_sum("entrokv_rejected_total") == rejected
    a.close()
    c.close()


def test_a_gathered_message_past_its_deadline_degrades_its_members(own_server):
    c = entrokv.Client(own_server.target, step_deadline=0.2, create_deadline=5.0)
    batch = c.create_batch()
    members = [batch.create_session("window", budget=2, shape=SHAPE, streaming_sinks=0)
               for _ in range(3)]
    for s in members:
        s.step_async([0], k(), q(), 1.0)
    assert all(not s.collect().fallback for s in members)
    own_server.pause()
    try:
        for s in members:
            s.step_async([1, 2], k(2), q(), 1.0)
        outs = [s.collect() for s in members]
    finally:
        own_server.resume()
    assert all(o.fallback and o.evicted == [0] for o in outs)
    assert all(s.degraded for s in members)
    assert c.counters().fallback_deadline == 3


def test_step_behind_a_gathered_message_that_fails_decides_locally(own_server):
    # A gathered step (a's, short deadline) goes out first; step() sends its
    # own message behind it on the same stream. When a's message fails, the
    # stream ends with both in flight: b and c decide locally, as C++ does,
    # rather than being sent on a new stream they are not attached to.
    c = entrokv.Client(own_server.target, step_deadline=2.0, create_deadline=5.0)
    batch = c.create_batch()
    a = batch.create_session("window", budget=2, shape=SHAPE, streaming_sinks=0,
                             step_deadline=0.2)
    b, d = [batch.create_session("window", budget=2, shape=SHAPE, streaming_sinks=0)
            for _ in range(2)]
    outs = batch.step([BatchStep(s, [0], k(), q()) for s in (a, b, d)])
    assert not any(o.fallback for o in outs)
    own_server.pause()
    resume = threading.Timer(0.5, own_server.resume)
    resume.start()
    try:
        a.step_async([1], k(), q(), 1.0)
        outs = batch.step([BatchStep(s, [1], k(), q()) for s in (b, d)])
    finally:
        resume.join()
    assert all(isinstance(o, entrokv.StepOutcome) and o.fallback for o in outs), outs
    assert a.collect().fallback
    assert all(s.degraded for s in (a, b, d))
    c.close()


def test_an_attach_behind_answers_in_flight_gets_its_whole_create_deadline():
    # A session created while a message is in flight first waits for its
    # answer (0.6 s here); its create_deadline (0.4 s) counts from then, as
    # in C++, so it is attached rather than offline.
    fake = FakeServer()
    fake.service.step_delay = 0.6
    try:
        c = entrokv.Client(fake.target, step_deadline=5.0, create_deadline=0.4)
        batch = c.create_batch()
        a = batch.create_session("window", budget=2, shape=SHAPE, streaming_sinks=0)
        a.step_async([0], k(), q(), 1.0)  # Every session gathered: sent.
        b = batch.create_session("window", budget=2, shape=SHAPE, streaming_sinks=0)
        assert not b.offline
        assert not a.collect().fallback
        c.close()
    finally:
        fake.stop()


def test_a_step_whose_message_failed_counts_its_own_cause(own_server):
    # Two messages in flight; the first misses its deadline and degrades the
    # session, which ends the stream with the second in flight. That step
    # counts the stream's end (unavailable), not "degraded", as in C++.
    c = entrokv.Client(own_server.target, step_deadline=0.2, create_deadline=5.0)
    batch = c.create_batch()
    a = batch.create_session("window", budget=2, shape=SHAPE, streaming_sinks=0)
    a.step_async([0], k(), q(), 1.0)
    assert not a.collect().fallback
    own_server.pause()
    try:
        a.step_async([1], k(), q(), 1.0)  # Sent: the batch's only session.
        a.step_async([2], k(), q(), 1.0)  # Its next step: a second message.
        first, second = a.collect(), a.collect()
    finally:
        own_server.resume()
    assert first.fallback and second.fallback
    cn = a.counters()
    assert (cn.fallback_deadline, cn.fallback_unavailable, cn.fallback_degraded) == (1, 1, 0)
    c.close()

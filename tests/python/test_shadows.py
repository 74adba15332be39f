"""Shadow policies through the Python client against a real server. The
expected attention recall, oracle recall and Jaccard are computed here with
numpy, from the rule in the proto's RecallSummary comment and
docs/design.md ("Shadow policies"), on live sets derived from the policies'
own rules (window: the newest B; streaming: the first 4 and the newest
B - 4)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import entrokv
from entrokv import EntroKvError, SessionConfig, ShadowRequest, Shape

SHAPE = Shape(layers=2, kv_heads=2, q_heads=4, head_dim=8, element_type="f32")
KE = SHAPE.full_key_elements()
QE = SHAPE.full_query_elements()
STEPS = 30
# The server scores in f32 with a vector exp (relative error < 2e-7,
# core/src/cpu_kernels.h); numpy here in float64.
RECALL_TOLERANCE = 1e-6


def stream(seed=4):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((STEPS, KE)).astype(np.float32),
            rng.standard_normal((STEPS, QE)).astype(np.float32))


def attention(keys, query):
    """a_i: the mean over (layer, q head) rows of softmax_i(q.k_i / sqrt(d))
    over every entry appended; GQA maps q head h to kv head h // group."""
    L, KV, Q, D = SHAPE.layers, SHAPE.kv_heads, SHAPE.q_heads, SHAPE.head_dim
    k = keys.reshape(len(keys), L, KV, D).astype(np.float64)
    q = query.reshape(L, Q, D).astype(np.float64)
    kv_of = np.arange(Q) // (Q // KV)
    z = np.einsum("lhd,nlhd->lhn", q, k[:, :, kv_of, :]) / np.sqrt(D)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return p.mean(axis=(0, 1))


def summary(values):
    v = np.sort(np.asarray(values))
    return v.mean(), v[int(np.ceil(0.1 * len(v))) - 1], v[0]


def wait_observed(client, session_id, steps):
    deadline = time.monotonic() + 10
    while True:
        info = client.get_session(session_id)
        if info.shadows.steps_observed == steps or time.monotonic() > deadline:
            return info
        time.sleep(0.01)


def test_recall_oracle_and_jaccard_match_numpy(client):
    keys, queries = stream()
    shadowing = ShadowRequest(["streaming",
                               SessionConfig.for_policy("window", budget=6)])
    s = client.create_session("window", budget=10, shape=SHAPE,
                              shadowing=shadowing)
    want = {"primary": [], "streaming": [], "window6": [], "oracle": []}
    jaccard = {"streaming": [], "window6": []}
    for t in range(STEPS):
        s.step([t], keys[t:t + 1], queries[t])
        n = t + 1
        a = attention(keys[:n], queries[t])
        ids = np.arange(n)
        sets = {"primary": set(ids[ids >= n - 10]),
                "streaming": set(ids[(ids < 4) | (ids >= n - 6)]) if n > 10
                else set(ids),
                "window6": set(ids[ids >= n - 6])}
        for name, live in sets.items():
            want[name].append(a[sorted(live)].sum())
        want["oracle"].append(np.sort(a)[::-1][:10].sum())
        for name in jaccard:
            both = len(sets[name] & sets["primary"])
            jaccard[name].append(both / len(sets[name] | sets["primary"]))
    info = wait_observed(client, s.id, STEPS)
    stats = info.shadows
    assert stats is not None and stats.steps_observed == STEPS
    reports = {"primary": stats.primary, "oracle": stats.oracle,
               "streaming": stats.shadows[0], "window6": stats.shadows[1]}
    assert [r.policy for r in stats.shadows] == ["streaming+fixed",
                                                 "window+fixed"]
    assert stats.shadows[0].config.budget == 10  # A name: the session's.
    assert stats.shadows[1].config.budget == 6
    for name, report in reports.items():
        mean, p10, low = summary(want[name])
        assert report.recall.steps == STEPS, name
        assert report.recall.mean == pytest.approx(mean, abs=RECALL_TOLERANCE), name
        assert report.recall.p10 == pytest.approx(p10, abs=RECALL_TOLERANCE), name
        assert report.recall.min == pytest.approx(low, abs=RECALL_TOLERANCE), name
    for name in jaccard:
        assert reports[name].mean_jaccard == pytest.approx(
            np.mean(jaccard[name]), abs=1e-12), name
    assert stats.reference_entries == STEPS
    assert stats.reference_bytes >= STEPS * KE * 4
    s.close()


def test_answers_are_the_same_with_and_without_shadows(client):
    keys, queries = stream(seed=8)
    plain = client.create_session("h2o", budget=8, shape=SHAPE)
    shadowed = client.create_session(
        "h2o", budget=8, shape=SHAPE,
        shadowing=ShadowRequest(["tova", "keynorm", "window"], score_every=2))
    for t in range(STEPS):
        a = plain.step([t], keys[t:t + 1], queries[t])
        b = shadowed.step([t], keys[t:t + 1], queries[t])
        assert (a.evicted, a.live, a.budget) == (b.evicted, b.live, b.budget)
        assert not b.fallback
    stats = wait_observed(client, shadowed.id, STEPS).shadows
    assert stats.score_every == 2
    assert stats.primary.recall.steps == STEPS // 2
    assert client.get_session(plain.id).shadows is None
    _, server = client.list_sessions()
    assert server.max_shadows == 4


def test_a_bad_shadow_is_refused_naming_the_field(client):
    with pytest.raises(EntroKvError) as e:
        client.create_session("window", budget=8, shape=SHAPE,
                              shadowing=ShadowRequest(
                                  ["h2o", SessionConfig.for_policy(
                                      "tova", budget=0)]))
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert "shadowing.policies[1].budget" in e.value.message
    with pytest.raises(EntroKvError) as e:
        client.create_session("window", budget=8, shape=SHAPE,
                              shadowing=ShadowRequest(["h2o"] * 5))
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert "shadowing.policies: 5 given" in e.value.message
    assert "--max_shadows" in e.value.message

"""The rankings of 2025-26 (keydiff, expected, birth, rkv) through the Python client and a
real server, against an independent numpy model of docs/step-semantics.md
(sections 3, 5, 7 and 8). Keys and queries are float32 draws, so that no two
keep scores tie up to rounding and the model's float64 arithmetic decides
exactly as the server's mixed float/double arithmetic does."""

from __future__ import annotations

import math

import numpy as np
import pytest

import entrokv
from entrokv import Shape

SHAPE = Shape(layers=2, kv_heads=2, q_heads=4, head_dim=8, element_type="f32")
L, KV, Q, D = SHAPE.layers, SHAPE.kv_heads, SHAPE.q_heads, SHAPE.head_dim


def keydiff_keep(keys):
    """-c_i: minus the mean over (layer, kv head) of cos(k_i, m), m the mean
    of the live keys' unit vectors."""
    k = np.asarray(keys, dtype=np.float64)  # [n, L, KV, D]
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True)
    m = unit.mean(axis=0)  # [L, KV, D]
    cos = (unit * m).sum(-1) / np.linalg.norm(m, axis=-1)
    return -cos.mean(axis=(1, 2))


class QueryModel:
    """Section 5's moving mean and variance of the queries."""

    def __init__(self, rate):
        self.rate, self.mu, self.var = rate, None, None

    def update(self, q):
        q = np.asarray(q, dtype=np.float64).reshape(L, Q, D)
        if self.mu is None:
            self.mu, self.var = q.copy(), np.zeros_like(q)
            return
        d = q - self.mu
        self.var = (1 - self.rate) * (self.var + self.rate * d * d)
        self.mu = self.mu + self.rate * d


def expected_keep(keys, model):
    """e_i: mean over (layer, q head) of softmax_i of
    mu.k/sqrt(d) + sum_j var_j k_j^2 / (2d), k of the head's kv head."""
    k = np.asarray(keys, dtype=np.float64)[:, :, np.arange(Q) // (Q // KV), :]
    z = (np.einsum("lhd,nlhd->lhn", model.mu, k) / math.sqrt(D)
         + np.einsum("lhd,nlhd->lhn", model.var, k * k) / (2 * D))
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)).mean(axis=(0, 1))


def rkv_redundancy(keys, sample):
    """R_i: per (layer, kv head) the softmax over live i of the mean over the
    reference rows (all live keys up to `sample`, else the append ranks
    floor(t * n / sample)) of the cosine, with the diagonal and each row's most
    recent duplicate (cosine > 0.5) set to 0; then the mean over planes. `keys`
    in append order."""
    k = np.asarray(keys, dtype=np.float64)  # [n, L, KV, D]
    n = len(k)
    rows = (list(range(n)) if n <= sample
            else [t * n // sample for t in range(sample)])
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True)
    out = np.zeros(n)
    for l in range(L):
        for g in range(KV):
            u = unit[:, l, g, :]
            s = u[rows] @ u.T  # [rows, n]
            for t, i in enumerate(rows):
                s[t, i] = 0.0
                dup = np.nonzero(s[t] > 0.5)[0]
                if len(dup):
                    s[t, dup.max()] = 0.0
            r = s.mean(axis=0)
            e = np.exp(r - r.max())
            out += e / e.sum()
    return out / (L * KV)


def attention(keys, query):
    """a_i: mean over (layer, q head) of softmax_i(q.k_i / sqrt(d))."""
    k = np.asarray(keys, dtype=np.float64)[:, :, np.arange(Q) // (Q // KV), :]
    q = np.asarray(query, dtype=np.float64).reshape(L, Q, D)
    z = np.einsum("lhd,nlhd->lhn", q, k) / math.sqrt(D)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)).mean(axis=(0, 1))


def run(client, policy, budget, steps, seed, block_size=1, rate=0.05,
        send_queries=True, sinks=0, recent=0, weight=1.0, lam=0.1, sample=64):
    """Steps a session and the model side by side; the evictions."""
    rng = np.random.default_rng(seed)
    s = client.create_session(
        policy, budget=budget, shape=SHAPE, block_size=block_size,
        expected_ema_rate=rate, birth_weight=weight, rkv_lambda=lam,
        rkv_sample=sample,
        protection=entrokv.Protection(sinks=sinks, recent=recent))
    model = QueryModel(rate)
    live = []  # (append index, slot, key), in append order.
    born = {}  # slot -> the entropy it was born under (birth).
    last_h = None
    appended = 0
    total = 0
    for t in range(steps):
        n = 10 if t == 0 else 1
        keys = rng.standard_normal((n, L, KV, D)).astype(np.float32)
        query = rng.standard_normal((L, Q, D)).astype(np.float32)
        slots = list(range(1000 + appended, 1000 + appended + n))
        h = float(rng.uniform(0.1, 3.0))
        for i, slot in enumerate(slots):
            live.append((appended, slot, keys[i]))
            born[slot] = h if last_h is None else last_h
            appended += 1
        last_h = h
        model.update(query)
        o = s.step(slots, keys, query if send_queries else None, entropy=h)
        want = []
        need = len(live) - budget
        if need > 0:
            lk = [k for _, _, k in live]
            if policy == "keydiff":
                keep = keydiff_keep(lk)
            elif policy == "expected":
                keep = expected_keep(lk, model)
            elif policy == "rkv":
                keep = (lam * attention(lk, query)
                        - (1 - lam) * rkv_redundancy(lk, sample))
            else:  # birth: a_i * exp(weight * H_birth)
                keep = attention(lk, query) * np.exp(
                    weight * np.array([born[slot] for _, slot, _ in live]))
            free = [i for i, (index, _, _) in enumerate(live)
                    if sinks <= index < appended - recent]
            if block_size == 1:
                cands = sorted((keep[i], live[i][0], live[i][1]) for i in free)
                gone = {c[2] for c in cands[:need]}
            else:
                blocks = {}
                for i in free:
                    blocks.setdefault(live[i][0] // block_size, []).append(i)
                cands = sorted((float(np.mean(keep[idx])), b, idx)
                               for b, idx in blocks.items()
                               if len(idx) == block_size)
                gone = {live[i][1] for c in cands[:-(-need // block_size)]
                        for i in c[2]}
            want = [slot for _, slot, _ in live if slot in gone]
            live = [e for e in live if e[1] not in gone]
        assert o.evicted == want, f"step {t}"
        assert o.live == len(live)
        total += len(o.evicted)
    s.close()
    return total


@pytest.mark.parametrize("policy,kw", [
    ("keydiff", {}),
    ("keydiff", dict(send_queries=False)),
    ("keydiff", dict(sinks=2, recent=3)),
    ("keydiff", dict(block_size=4, budget=12)),
    ("expected", {}),
    ("expected", dict(rate=0.3, sinks=1, recent=2)),
    ("expected", dict(rate=1.0)),
    ("birth", {}),
    ("birth", dict(weight=3.0, sinks=1, recent=2)),
    ("birth", dict(block_size=4, budget=12)),
    ("rkv", {}),
    ("rkv", dict(sample=5, lam=0.3, sinks=1, recent=2)),
    ("rkv", dict(block_size=4, budget=12, sample=7)),
])
def test_evictions_equal_numpy_model(client, policy, kw):
    kw = dict(kw)
    budget = kw.pop("budget", 9)
    assert run(client, policy, budget, steps=40, seed=len(kw) + 3, **kw) > 20


def test_keydiff_needs_no_queries_and_expected_needs_per_head(client):
    with pytest.raises(entrokv.EntroKvError) as e:
        client.create_session("expected", budget=4, shape=Shape(
            layers=1, kv_heads=1, q_heads=2, head_dim=4, query_form="group_sum"))
    assert "shape.query_form" in str(e.value)
    s = client.create_session("window", budget=4, shape=SHAPE)
    with pytest.raises(entrokv.EntroKvError) as e:
        s.step([1], np.zeros(L * KV * D, np.float32), None)
    assert "queries" in str(e.value)
    s.close()

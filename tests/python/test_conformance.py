"""Cross-language conformance of the Python client.

- Sketches: the Python DefaultProjection and Sketcher output are compared bit
  for bit with C++'s, through a tiny C++ program (cpp/projection_dump.cc)
  built against the build tree's core library (skipped when g++ or the
  library is missing).
- Evictions: a synthetic story (prefill chunk, pinned entries, sinks, recent
  window, block granularity) is stepped through the server by the Python
  client and compared with an independent naive Python model of
  docs/step-semantics.md, for window, streaming, random and affinity
  (entropy budget and fixed; seed and logit_ema). Keys and queries are small
  integers, so every dot product and mean logit is exact in float and double
  and the model reproduces the C++ core's decisions exactly (its affinity
  and budget arithmetic are the same double operations in the same order).
"""

from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest

import entrokv
from entrokv import Shape

from conftest import build_cpp_reference

# --- Sketches vs C++ -------------------------------------------------------------


@pytest.fixture(scope="module")
def projection_dump():
    return build_cpp_reference("projection_dump.cc", ["core/libentrokv_core.a"])


def _cpp_sketch(binary, seed, layers, kv, qh, d, r, group_sum, scored, keys, queries):
    args = [binary, str(seed), str(layers), str(kv), str(qh), str(d), str(r),
            "1" if group_sum else "0", *map(str, scored)]
    n = keys.shape[0]
    stdin = f"{n}\n" + " ".join("%08x" % v for v in keys.view(np.uint32).reshape(-1)) + \
        "\n" + " ".join("%08x" % v for v in queries.view(np.uint32).reshape(-1)) + "\n"
    out = subprocess.run(args, input=stdin, capture_output=True, text=True, check=True).stdout
    ps, k, q = [], None, None
    for line in out.splitlines():
        tag, *vals = line.split()
        if tag == "P":
            ps.append(np.array([int(v, 16) for v in vals], np.uint64))
        elif tag == "K":
            k = np.array([int(v, 16) for v in vals], np.uint32)
        elif tag == "Q":
            q = np.array([int(v, 16) for v in vals], np.uint32)
    return ps, k, q


@pytest.mark.parametrize("seed,layers,kv,qh,d,r,group_sum,scored", [
    (0, 1, 1, 1, 4, 2, False, []),
    (7, 2, 2, 4, 8, 8, False, []),
    (12345, 2, 2, 8, 64, 16, True, [3, 9]),
    ((1 << 63) + 5, 4, 1, 4, 128, 32, False, [4, 12, 20, 28]),
    (99, 1, 4, 4, 16, 3, True, [511]),
])
def test_sketch_bit_identical_to_cpp(projection_dump, seed, layers, kv, qh, d, r,
                                     group_sum, scored):
    rng = np.random.default_rng(seed % 1000)
    n = 3
    keys = rng.standard_normal((n, layers * kv * d)).astype(np.float32)
    queries = rng.standard_normal(layers * qh * d).astype(np.float32)
    ps, k, q = _cpp_sketch(projection_dump, seed, layers, kv, qh, d, r, group_sum,
                           scored, keys, queries)
    i = 0
    for l in range(layers):
        for g in range(kv):
            layer = scored[l] if scored else l
            p = entrokv.default_projection(seed, layer, g, d, r)
            assert np.array_equal(p.reshape(-1).view(np.uint64), ps[i]), (l, g)
            i += 1
    config = entrokv.SessionConfig(
        shape=Shape(layers=layers, kv_heads=kv, q_heads=qh, head_dim=d, sketch_dim=r,
                    query_form="group_sum" if group_sum else "per_head"),
        ranking="window", scored_layers=list(scored), projection_seed=seed)
    s = entrokv.Sketcher(config)
    assert np.array_equal(s.keys(keys.reshape(-1), n).view(np.uint32), k)
    assert np.array_equal(s.queries(queries).view(np.uint32), q)


@pytest.mark.parametrize("group_sum", [False, True])
def test_sketch_sums_each_column_in_row_order(group_sum):
    """The order of the sum over j, which random vectors cannot show (another
    order moves a double's last bits, hidden by the rounding to float): with a
    matrix of ones, (1e20, -1e20, 1, 0, ...) sums to 1 in the documented order
    (j ascending, from 0.0) and to 0 in reverse or pairwise. Group sums add
    two such heads: 2."""
    d = r = 16
    config = entrokv.SessionConfig(
        shape=Shape(layers=2, kv_heads=2, q_heads=4, head_dim=d, sketch_dim=r,
                    query_form="group_sum" if group_sum else "per_head"),
        ranking="window")
    s = entrokv.Sketcher(config, projection=np.ones(2 * 2 * d * r, np.float32))
    v = np.zeros((12, d), np.float32)
    v[:, :3] = [1e20, -1e20, 1.0]
    keys = s.keys(v[:3 * 4].reshape(-1), 3)
    assert keys.shape == (3 * 4 * r,) and np.all(keys == 1.0)
    queries = s.queries(v[:8].reshape(-1))
    assert queries.shape == ((4 if group_sum else 8) * r,)
    assert np.all(queries == (2.0 if group_sum else 1.0))


def test_default_scored_layers():
    assert entrokv.default_scored_layers(32) == [4, 12, 20, 28]
    assert entrokv.default_scored_layers(3) == [0, 1, 2]
    assert entrokv.default_scored_layers(5) == [0, 1, 3, 4]


def test_sketched_session_sends_r_columns(client):
    shape = Shape(layers=2, kv_heads=2, q_heads=4, head_dim=16, sketch_dim=4,
                  element_type="f32")
    exact = client.create_session("keynorm", budget=3, shape=Shape(
        layers=2, kv_heads=2, q_heads=4, head_dim=16, element_type="f32"))
    s = client.create_session("keynorm", budget=3, shape=shape, projection_seed=5)
    assert s.config.shape.sketch_dim == 4
    rng = np.random.default_rng(0)
    for t in range(6):
        k = rng.standard_normal(64).astype(np.float32)
        q = rng.standard_normal(128).astype(np.float32)
        s.step([t], k, q)
        exact.step([t], k, q)
    # 4 of 16 columns: the sketched keys and queries are a quarter the bytes.
    assert s.counters().bytes_sent < 0.5 * exact.counters().bytes_sent
    s.close()
    exact.close()


# --- Evictions vs a naive model of docs/step-semantics.md ---------------------------

_M64 = (1 << 64) - 1


def _random_keep(seed, index, step):
    x = (seed + 0x9E3779B97F4A7C15 * (index + 1) + 0xD1B54A32D192ED03 * step) & _M64
    return (entrokv.splitmix64(x) >> 11) * 2.0 ** -53


def _llround(x):
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


class NaiveCore:
    """One session of docs/step-semantics.md, as plainly as possible."""

    def __init__(self, c: entrokv.SessionConfig):
        self.c = c
        self.live = []  # dicts: index, slot, pinned, key, a
        self.next_index = 0
        self.started = False
        self.mean = self.var = 0.0
        e = c.entropy_budget
        self.bmin = e.min_budget or 1
        self.bmax = e.max_budget or math.ceil(c.budget * (1 + e.gamma))

    def budget(self, h):
        c = self.c
        if c.budget_control == "fixed":
            return c.budget
        e = c.entropy_budget
        if not self.started:
            self.started, self.mean, self.var = True, h, 0.0
        z = (h - self.mean) / (math.sqrt(self.var) + e.epsilon)
        b = min(max(_llround(c.budget * (1.0 + e.gamma * math.tanh(z))), self.bmin), self.bmax)
        d = h - self.mean
        self.var = (1.0 - e.ema_rate) * (self.var + e.ema_rate * d * d)
        self.mean += e.ema_rate * d
        return b

    def step(self, step, slots, pinned, keys, queries, h):
        c, s = self.c, self.c.shape
        for i, slot in enumerate(slots):
            self.live.append(dict(index=self.next_index, slot=slot,
                                  pinned=bool(pinned[i]) if pinned else False,
                                  key=keys[i], a=0.5 if c.affinity.update == "seed" else 0.0))
            self.next_index += 1
        if c.ranking == "affinity":
            g = s.group_size
            for e in self.live:
                total = 0
                for l in range(s.layers):
                    for hq in range(s.q_heads):
                        total += int(np.dot(queries[l, hq].astype(np.int64),
                                            e["key"][l, hq // g].astype(np.int64)))
                mean_logit = total / (math.sqrt(s.head_dim) * s.layers * s.q_heads)
                beta_h = c.affinity.beta * h
                if c.affinity.update == "seed":
                    e["a"] = 1.0 / (1.0 + math.exp(-(e["a"] + beta_h * mean_logit)))
                else:
                    e["a"] = c.affinity.lambda_ * e["a"] + beta_h * mean_logit
        b = self.budget(h)
        need = len(self.live) - b
        if need <= 0:
            return [], b

        def keep(e):
            if c.ranking == "window":
                return float(e["index"])
            if c.ranking == "streaming":
                return math.inf if e["index"] < c.streaming_sinks else float(e["index"])
            if c.ranking == "random":
                return _random_keep(c.seed, e["index"], step)
            if c.affinity.update == "seed":
                return e["a"]
            return 1.0 / (1.0 + math.exp(-e["a"]))

        def protected(e):
            return (e["pinned"] or e["index"] < c.protection.sinks
                    or e["index"] >= self.next_index - c.protection.recent)

        n = c.block_size
        if n <= 1:
            cands = sorted((keep(e), e["index"], e["slot"]) for e in self.live if not protected(e))
            gone = {x[2] for x in cands[:need]}
        else:
            blocks = {}
            for e in self.live:
                blocks.setdefault(e["index"] // n, []).append(e)
            cands = []
            for bid, es in blocks.items():
                if len(es) == n and not any(protected(e) for e in es):
                    cands.append((sum(keep(e) for e in es) / n, bid, [e["slot"] for e in es]))
            cands.sort(key=lambda x: (x[0], x[1]))
            gone = {slot for x in cands[:(need + n - 1) // n] for slot in x[2]}
        evicted = [e["slot"] for e in self.live if e["slot"] in gone]
        self.live = [e for e in self.live if e["slot"] not in gone]
        return evicted, b


def _story(steps, shape, seed):
    rng = np.random.default_rng(seed)
    slot = 1000
    out = []
    for t in range(steps):
        n = 6 if t == 0 else int(rng.integers(0, 3))  # A prefill chunk, then decode.
        slots = list(range(slot, slot + n))
        slot += n
        pinned = [bool(rng.random() < 0.08) for _ in slots]
        keys = rng.integers(-3, 4, size=(n, shape.layers, shape.kv_heads, shape.head_dim))
        queries = rng.integers(-3, 4, size=(shape.layers, shape.q_heads, shape.head_dim))
        h = float(rng.uniform(0.2, 3.0))
        out.append((slots, pinned, keys, queries, h))
    return out


SHAPE = Shape(layers=2, kv_heads=2, q_heads=4, head_dim=4, element_type="f32")


@pytest.mark.parametrize("policy,extra", [
    ("window", {}),
    ("window", dict(block_size=4)),
    ("streaming", dict(streaming_sinks=3)),
    ("random", dict(seed=42, protection=entrokv.Protection(sinks=2, recent=3))),
    ("random", dict(seed=7, block_size=4)),
    ("entropy", {}),
    ("entropy", dict(protection=entrokv.Protection(sinks=1, recent=2))),
    ("affinity+fixed", dict(affinity=entrokv.AffinityParams(update="seed", beta=0.5))),
    ("window+entropy", dict(entropy_budget=entrokv.EntropyBudgetParams(gamma=0.8, ema_rate=0.2))),
])
def test_evictions_equal_naive_model(client, policy, extra):
    story = _story(60, SHAPE, seed=len(policy) * 31 + len(extra))
    s = client.create_session(policy, budget=8, shape=SHAPE, **extra)
    model = NaiveCore(s.config)
    total = 0
    for t, (slots, pinned, keys, queries, h) in enumerate(story):
        o = s.step(slots, keys.astype(np.float32), queries.astype(np.float32),
                   entropy=h, pinned=pinned)
        expected, b = model.step(t, slots, pinned, keys, queries, h)
        assert (o.evicted, o.budget) == (expected, b), f"step {t}"
        assert o.live == len(model.live)
        total += len(o.evicted)
    assert total > 10  # The story really evicts.
    s.close()

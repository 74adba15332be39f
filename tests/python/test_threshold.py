"""The threshold budget control through the Python client and a real server,
against an independent numpy model of docs/step-semantics.md sections 6 and 8:
B is a ceiling, and every candidate (token or whole block) outside the
protection whose keep score is below tau is evicted as well."""

from __future__ import annotations

import numpy as np
import pytest

import entrokv
from test_rankings_2025 import KV, L, Q, D, SHAPE, attention, keydiff_keep


def run(client, ranking, budget, tau, steps, seed, block_size=1, sinks=0,
        recent=0):
    """Steps a session and the model side by side; (evicted, mean live)."""
    rng = np.random.default_rng(seed)
    s = client.create_session(
        f"{ranking}+threshold", budget=budget, shape=SHAPE,
        block_size=block_size, threshold_tau=tau,
        protection=entrokv.Protection(sinks=sinks, recent=recent))
    live = []  # (append index, slot, key), in append order.
    appended = 0
    total = 0
    live_sum = 0
    for t in range(steps):
        n = 10 if t == 0 else 1
        keys = rng.standard_normal((n, L, KV, D)).astype(np.float32)
        query = rng.standard_normal((L, Q, D)).astype(np.float32)
        slots = list(range(1000 + appended, 1000 + appended + n))
        for i, slot in enumerate(slots):
            live.append((appended, slot, keys[i]))
            appended += 1
        o = s.step(slots, keys, query)
        lk = [k for _, _, k in live]
        keep = attention(lk, query) if ranking == "tova" else keydiff_keep(lk)
        need = max(len(live) - budget, 0)
        free = [i for i, (index, _, _) in enumerate(live)
                if sinks <= index < appended - recent]
        if block_size == 1:
            cands = sorted((keep[i], live[i][0], live[i][1]) for i in free)
            below = sum(1 for c in cands if c[0] < tau)
            gone = {c[2] for c in cands[:max(need, below)]}
        else:
            blocks = {}
            for i in free:
                blocks.setdefault(live[i][0] // block_size, []).append(i)
            cands = sorted((float(np.mean(keep[idx])), b, idx)
                           for b, idx in blocks.items()
                           if len(idx) == block_size)
            below = sum(1 for c in cands if c[0] < tau)
            take = max(-(-need // block_size), below)
            gone = {live[i][1] for c in cands[:take] for i in c[2]}
        want = [slot for _, slot, _ in live if slot in gone]
        live = [e for e in live if e[1] not in gone]
        assert o.evicted == want, f"step {t}"
        assert o.live == len(live)
        assert o.budget == budget
        total += len(o.evicted)
        live_sum += o.live
    s.close()
    return total, live_sum / steps


@pytest.mark.parametrize("ranking,budget,tau,kw", [
    ("tova", 40, 0.03, {}),                        # the threshold alone
    ("tova", 12, 0.03, dict(sinks=1, recent=4)),   # and the ceiling
    ("tova", 40, 0.04, dict(block_size=4)),
    ("keydiff", 40, -0.1, dict(recent=3)),
])
def test_evictions_equal_numpy_model(client, ranking, budget, tau, kw):
    evicted, mean_live = run(client, ranking, budget, tau, steps=50,
                             seed=budget + len(kw), **kw)
    assert evicted > 20
    assert mean_live <= budget


def test_window_has_no_threshold_and_tau_must_be_finite(client):
    with pytest.raises(entrokv.EntroKvError) as e:
        client.create_session("window+threshold", budget=4, shape=SHAPE)
    assert "budget_control" in str(e.value)
    with pytest.raises(entrokv.EntroKvError) as e:
        client.create_session("tova+threshold", budget=4, shape=SHAPE,
                              threshold_tau=float("inf"))
    assert "threshold.tau" in str(e.value)

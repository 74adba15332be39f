"""The demote tier (docs/step-semantics.md section 12) against an independent
numpy model of the section, through a tiny C++ program (cpp/tier_dump.cc)
that steps a CPU session of the build tree's core library (skipped when g++
or the library is missing). test_tier_client.py runs the same model through
the Python client and a server.

One layer and head, f32, a fixed budget; keys and queries are small integers,
so every logit is a multiple of 1/2, exact in float and double, and distinct
logits give keep scores far apart: the model's float64 arithmetic orders
entries exactly as the core does. Only a promotion's margin compares two
softmax values that could come within rounding of each other; a run where
that happens (|gap - margin| < 1e-6) is not compared, and most runs must be.
"""

from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest

from conftest import build_cpp_reference

HEAD_DIM = 4
MASK = (1 << 64) - 1


@pytest.fixture(scope="module")
def tier_dump():
    return build_cpp_reference("tier_dump.cc", ["core/libentrokv_core.a"])


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def random_keep(seed, index, step):
    x = (seed + 0x9E3779B97F4A7C15 * (index + 1) + 0xD1B54A32D192ED03 * step) & MASK
    return (splitmix64(x) >> 11) / float(1 << 53)


class Fragile(Exception):
    """A margin comparison within rounding: the run is not compared."""


class TierModel:
    """Section 12 over sections 3 and 7 for tova, keynorm and random."""

    def __init__(self, ranking, budget, capacity, margin, max_promotions,
                 sinks, recent, seed):
        self.ranking, self.budget, self.capacity = ranking, budget, capacity
        self.margin, self.max_promotions = margin, max_promotions
        self.sinks, self.recent, self.seed = sinks, recent, seed
        self.entries = []  # Held, in append order: dicts.
        self.next_index = 0

    def keep(self, step, query):
        """Keep scores of the held entries (section 3 over the held set)."""
        keys = np.array([e["key"] for e in self.entries], dtype=np.float64)
        if self.ranking == "tova":
            z = keys @ np.asarray(query, np.float64) / math.sqrt(HEAD_DIM)
            p = np.exp(z - z.max())
            return p / p.sum()
        if self.ranking == "keynorm":
            return -np.sqrt((keys * keys).sum(axis=1))
        return np.array([random_keep(self.seed, e["index"], step)
                         for e in self.entries])

    def protected(self, e):
        return (e["pinned"] or e["index"] < self.sinks
                or e["index"] >= self.next_index - self.recent)

    def step(self, step, appended, query):
        for slot, pinned, key in appended:
            self.entries.append(dict(slot=slot, index=self.next_index,
                                     pinned=pinned, key=key, state="live"))
            self.next_index += 1
        start = [e["state"] for e in self.entries]
        keep = self.keep(step, query)
        for e, k in zip(self.entries, keep):
            e["keep"] = float(k)
        order = lambda e: (e["keep"], e["index"])  # Weakest first.
        live = sorted((e for e in self.entries
                       if e["state"] == "live" and not self.protected(e)),
                      key=order)
        tier = sorted((e for e in self.entries if e["state"] == "demoted"),
                      key=order, reverse=True)
        n_live = sum(e["state"] == "live" for e in self.entries)
        down = min(max(n_live - self.budget, 0), len(live))
        for e in live[:down]:
            e["state"] = "demoted"
        n_live -= down
        w = down
        for t in tier[:self.max_promotions]:
            if n_live < self.budget:
                n_live += 1
            elif w < len(live):
                gap = t["keep"] - live[w]["keep"]
                # Equal logits give bit-equal keep scores here and in the
                # core: a zero gap against a zero margin is exact.
                if (self.ranking == "tova" and abs(gap - self.margin) < 1e-6
                        and not (gap == 0 and self.margin == 0)):
                    raise Fragile()
                if not t["keep"] > live[w]["keep"] + self.margin:
                    break
                live[w]["state"] = "demoted"
                w += 1
            else:
                break
            t["state"] = "live"
        held = sorted((e for e in self.entries if e["state"] == "demoted"),
                      key=order)
        for e in held[:max(len(held) - self.capacity, 0)]:
            e["state"] = "gone"
        moves = dict(demoted=[], promoted=[], evicted=[])
        for e, s in zip(self.entries, start):
            if e["state"] == "gone":
                moves["evicted"].append(e["slot"])
            elif s == "live" and e["state"] == "demoted":
                moves["demoted"].append(e["slot"])
            elif s == "demoted" and e["state"] == "live":
                moves["promoted"].append(e["slot"])
        self.entries = [e for e in self.entries if e["state"] != "gone"]
        moves["live"] = sum(e["state"] == "live" for e in self.entries)
        return moves


def hexes(values):
    return " ".join("%08x" % v for v in
                    np.asarray(values, np.float32).view(np.uint32).reshape(-1))


def parse(line):
    tokens = line.split()
    assert tokens[0] == "live", line
    out, i = dict(live=int(tokens[1])), 2
    while i < len(tokens):
        name, count = tokens[i], int(tokens[i + 1])
        out[name] = [int(v) for v in tokens[i + 2:i + 2 + count]]
        i += 2 + count
    return out


def story(rng, steps):
    """Steps of appends (a prefill, then 0-3 a step, a few pinned) and
    queries, integer vectors."""
    slot, out = 1000, []
    for t in range(steps):
        n = 10 if t == 0 else int(rng.integers(0, 4))
        appended = []
        for _ in range(n):
            key = rng.integers(-2, 3, HEAD_DIM).astype(np.float32)
            appended.append((slot, int(rng.random() < 0.03), key))
            slot += 1
        out.append((appended, rng.integers(-2, 3, HEAD_DIM).astype(np.float32)))
    return out


CASES = [
    # ranking, budget, capacity, margin, max_promotions, sinks, recent
    ("tova", 5, 4, 0.0, 2, 0, 0),
    ("tova", 5, 1, 0.05, 1, 1, 1),
    ("tova", 6, 10, 0.02, 8, 0, 2),
    ("random", 5, 3, 0.1, 2, 1, 1),
    ("random", 4, 6, 0.0, 0, 0, 0),
    ("keynorm", 5, 3, 0.0, 2, 1, 0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "_".join(map(str, c)))
def test_tier_matches_the_numpy_model(tier_dump, case):
    ranking, budget, capacity, margin, promotions, sinks, recent = case
    seed = 11
    compared = promoted = demoted = 0
    for run in range(10):
        rng = np.random.default_rng(1000 * run + budget)
        steps = story(rng, 40)
        stdin = []
        for appended, query in steps:
            stdin.append(str(len(appended)))
            stdin += [f"{slot} {pinned}" for slot, pinned, _ in appended]
            stdin += [hexes([k for _, _, k in appended]) if appended else "",
                      hexes(query)]
        args = [tier_dump, ranking, str(budget), str(capacity), repr(margin),
                str(promotions), str(sinks), str(recent), str(HEAD_DIM),
                str(seed)]
        out = subprocess.run(args, input="\n".join(stdin) + "\n",
                             capture_output=True, text=True, check=True)
        got = [parse(line) for line in out.stdout.splitlines()]
        assert len(got) == len(steps)
        model = TierModel(ranking, budget, capacity, margin, promotions,
                          sinks, recent, seed)
        try:
            for t, ((appended, query), answer) in enumerate(zip(steps, got)):
                want = model.step(t + 1, appended, query)
                assert answer == want, f"run {run} step {t + 1}"
                promoted += len(want["promoted"])
                demoted += len(want["demoted"])
        except Fragile:
            continue
        compared += 1
    assert compared >= 8
    assert demoted > 0
    # keynorm's keep scores never change: without a recent window, every
    # unprotected live entry outranks every demoted one (by induction over
    # the steps), so nothing is ever promoted.
    assert (promoted > 0) == (promotions > 0 and ranking != "keynorm")

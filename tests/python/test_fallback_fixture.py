"""The Python client's fail-open streaming rule (entrokv/live_set.py) against
the C++ one on shared vectors: tests/fixtures/fallback_streaming.txt, which
the C++ client's tests generate and check (tests/client/live_set_test.cc,
FallbackFixtureTest). Every step's evictions must be the same ids, in the
same order."""

from __future__ import annotations

import os

from entrokv.live_set import LiveSet, StreamingRule

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures",
                       "fallback_streaming.txt")


def cases():
    """(rule, [(ids, pinned, evicted), ...]) per case of the fixture."""
    out = []
    with open(FIXTURE) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#") or not line.strip():
                continue
            if line.startswith("case "):
                budget, sinks, recent, block = map(int, line.split()[1:])
                out.append((StreamingRule(budget=budget, sinks=sinks,
                                          recent=recent, block_size=block), []))
                continue
            appended, _, evicted = line.partition("->")
            pairs = [p.split(":") for p in appended.split()]
            out[-1][1].append(([int(s) for s, _ in pairs],
                               [p == "1" for _, p in pairs],
                               [int(e) for e in evicted.split()]))
    return out


def test_the_fixture_has_cases_that_evict():
    all_cases = cases()
    assert len(all_cases) == 24
    assert {rule.block_size for rule, _ in all_cases} != {1}
    assert sum(1 for _, steps in all_cases for s in steps if s[2]) > 100


def test_python_evicts_what_cpp_evicts_on_every_step():
    for rule, steps in cases():
        live = LiveSet()
        for number, (ids, pinned, expected) in enumerate(steps):
            live.append(ids, pinned)
            evicted = live.streaming_evictions(rule)
            assert evicted == expected, (rule, number)
            live.remove(evicted)

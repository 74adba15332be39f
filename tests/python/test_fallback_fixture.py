"""The Python client's fail-open streaming rule (entrokv/live_set.py) against
the C++ one on shared vectors: tests/fixtures/fallback_streaming.txt (and
tier_live_set.txt for the demote tier's record and fail-open rule), which
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


TIER_FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures",
                            "tier_live_set.txt")


def tier_cases():
    """(rule, [step dict, ...]) per case of the demote-tier fixture
    (tests/client/live_set_test.cc, TierFixture)."""
    out = []
    with open(TIER_FIXTURE) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#") or not line.strip():
                continue
            if line.startswith("case "):
                budget, sinks, recent = map(int, line.split()[1:])
                out.append((StreamingRule(budget=budget, sinks=sinks,
                                          recent=recent), []))
                continue
            moves, _, after = line.partition("->")
            appended, *labelled = moves.split("|")
            fail_open, *state = after.split("|")
            step = {}
            for part in labelled + state:
                label, *ids = part.split()
                step[label] = [int(i) for i in ids]
            pairs = [p.split(":") for p in appended.split()]
            step["ids"] = [int(s) for s, _ in pairs]
            step["pinned"] = [p == "1" for _, p in pairs]
            step["fail_open"] = [int(i) for i in fail_open.split()]
            out[-1][1].append(step)
    return out


def test_the_tier_fixture_moves_entries_both_ways():
    steps = [s for _, case in tier_cases() for s in case]
    assert len(steps) == 12 * 30
    assert sum(len(s["promote"]) for s in steps) > 50
    # Some fail-open answers merge the rule's evictions with the tier.
    assert any(set(s["fail_open"]) - set(s["tier"]) and s["tier"]
               for s in steps)


def test_python_keeps_the_tier_as_cpp_does():
    for rule, steps in tier_cases():
        live = LiveSet()
        for number, s in enumerate(steps):
            live.append(s["ids"], s["pinned"])
            live.remove(s["evict"])
            live.demote(s["demote"])
            live.promote(s["promote"])
            assert live.fail_open_evictions(rule) == s["fail_open"], (rule, number)
            assert live.slots() == s["live"], (rule, number)
            assert live.tier_slots() == s["tier"], (rule, number)

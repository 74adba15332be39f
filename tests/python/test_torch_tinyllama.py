"""Cross-language conformance of the PyTorch engine
(client/examples/torch_tinyllama, through the Python client and a real server)
with the C++ engine (eval/tinyllama, core deciding in process):
the same tokens, teacher-forced NLL equal within float tolerance, and the same
eviction sequence (for every position, the first position that no longer
attends it) for window and streaming, whose rankings do not depend on float
rounding (and, as observed, for entropy too on these stories).

Skipped without torch (Debian: python3-torch), without the TinyStories data
(../shared/data/tinystories or $ENTROKV_DATA), or without the build tree's
libentrokv_tinyllama.a and g++ to build the C++ reference."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import entrokv  # noqa: E402

from conftest import REPO, build_cpp_reference  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "client", "examples", "torch_tinyllama"))
import tinyllama as tl  # noqa: E402

STORIES = 3
MAX_TOKENS = 160
BUDGET = 32

@pytest.fixture(scope="module")
def data():
    d = tl.data_dir()
    if not os.path.exists(os.path.join(d, "stories260K.bin")):
        pytest.skip(f"no TinyStories data at {d}")
    return (d, *tl.load(d))


@pytest.fixture(scope="module")
def cpp_reference():
    return build_cpp_reference(
        "tinyllama_ref.cc",
        ["eval/tinyllama/libentrokv_tinyllama.a",
         "eval/sim/libentrokv_sim_variant.a", "core/libentrokv_core.a"],
        includes=("core/include", "client/examples", "sim"))


def run_reference(binary, d, policy):
    lines = subprocess.run([binary, d, policy, str(BUDGET), str(STORIES), str(MAX_TOKENS)],
                           check=True, capture_output=True, text=True).stdout.splitlines()
    stories = []
    for i in range(0, len(lines), 3):
        stories.append(dict(tokens=[int(x) for x in lines[i].split()[1:]],
                            nll=float(lines[i + 1].split()[1]),
                            live_sum=int(lines[i + 1].split()[2]),
                            evicted_at=[int(x) for x in lines[i + 2].split()[1:]]))
    return stories


@pytest.mark.parametrize("policy", ["full", "window", "streaming", "entropy"])
def test_torch_engine_matches_cpp_engine(server, data, cpp_reference, policy):
    d, model, tok = data
    ref = run_reference(cpp_reference, d, policy)
    client = entrokv.Client(server.target, step_deadline=5.0, create_deadline=5.0)
    stories = tl.load_stories(os.path.join(d, "tinystories_valid_head.txt"), STORIES)
    assert len(stories) == len(ref) == STORIES
    for story, r in zip(stories, ref):
        tokens = tok.encode(story)[:MAX_TOKENS]
        assert tokens == r["tokens"]
        got = tl.evaluate_policy(client, model, tokens,
                                 None if policy == "full" else policy, BUDGET)
        assert got.nll_sum == pytest.approx(r["nll"], rel=1e-6, abs=1e-4)
        assert got.live_sum == r["live_sum"]
        if policy != "entropy":  # Rankings independent of float rounding.
            assert got.evicted_at == r["evicted_at"]
        assert got.fallback_steps == 0
    client.close()

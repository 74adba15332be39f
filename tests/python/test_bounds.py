"""The Python client's own config validation against the bounds the proto
documents: tests/server/bounds_test.cc checks the server the same way. The
client rejects a bad configuration before any RPC (config.validate_config),
so its bounds are a second implementation of the contract and must agree
with it. This test reads every "Bound: [lo, hi]." line of a config field and
the shape's "Product bound: [1, 2^N]" from proto/entrokv/v1/entrokv.proto,
then checks that each bound is accepted and the value just past it rejected
with INVALID_ARGUMENT naming the field. No server is needed."""

from __future__ import annotations

import math
import os
import re

import grpc
import pytest

import entrokv
from entrokv import EntroKvError, Shape
from source_package import REPO

PROTO = os.path.join(REPO, "proto", "entrokv", "v1", "entrokv.proto")

# Config messages and their path in a SessionConfig, as error messages
# name them ("shape.layers", "budget", ...).
PATHS = {"Shape": "shape", "AffinityParams": "affinity",
         "EntropyBudgetParams": "entropy_budget", "H2oParams": "h2o",
         "Protection": "protection", "SessionConfig": ""}
BUDGET, HEAD_DIM = 100, 64

_BOUND = re.compile(r"Bound:\s*(0 or\s+)?([\[(])\s*([^,\s]+)\s*,\s*([^\])\s]+)\s*([\])])")


def field_comments():
    """{"Message.field": its comment}: the comment lines just above a field
    and the trailing comment on its line (bounds_test.cc's reading)."""
    message_line = re.compile(r"^\s*message\s+(\w+)\s*\{")
    field_line = re.compile(
        r"^\s*(?:optional\s+|repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+\s*;(.*)$")
    comment_line = re.compile(r"^\s*//(.*)$")
    comments, message, pending = {}, None, ""
    with open(PROTO, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if m := message_line.search(line):
                message, pending = m.group(1), ""
            elif m := comment_line.match(line):
                pending += " " + m.group(1)
            elif message and (m := field_line.match(line)):
                comments[f"{message}.{m.group(1)}"] = pending + m.group(2)
                pending = ""
            else:
                pending = ""
    return comments


def end_value(end: str) -> float:
    if end == "budget":
        return BUDGET
    if end == "head_dim":
        return HEAD_DIM
    if m := re.fullmatch(r"2\^(\d+)(?:-(\d+))?", end):
        return (1 << int(m.group(1))) - int(m.group(2) or 0)
    return float(end)


def probes(bound, integer: bool):
    """(value, accepted) for each end and its neighbour across it."""
    zero_too, lo_open, lo, hi, hi_close = bound
    lo, hi = end_value(lo), end_value(hi)
    lo_in, hi_in = lo_open == "[", hi_close == "]"

    def step(v, d):
        return int(v) + d if integer else math.nextafter(v, d * math.inf)

    out = [(lo, lo_in), (step(lo, -1 if lo_in else +1), not lo_in),
           (hi, hi_in), (step(hi, +1 if hi_in else -1), not hi_in)]
    if zero_too:
        out = [(v, ok or v == 0) for v, ok in out] + [(0, True)]
    return out


def base_config() -> entrokv.SessionConfig:
    return entrokv.SessionConfig.for_policy(
        "entropy", budget=BUDGET,
        shape=Shape(layers=1, kv_heads=1, q_heads=1, head_dim=HEAD_DIM,
                    element_type="f32"), placement="cpu")


def _owner_and_attr(c: entrokv.SessionConfig, message: str, name: str):
    """The Python object and attribute that hold proto field message.name."""
    if message == "H2oParams":
        return c, "h2o_recent_fraction"
    target = getattr(c, PATHS[message]) if PATHS[message] else c
    return target, "lambda_" if name == "lambda" else name


def is_integer(message: str, name: str) -> bool:
    owner, attr = _owner_and_attr(entrokv.SessionConfig(), message, name)
    return not isinstance(getattr(owner, attr), float)


def set_field(c: entrokv.SessionConfig, message: str, name: str, value) -> None:
    owner, attr = _owner_and_attr(c, message, name)
    setattr(owner, attr, [value] if name == "scored_layers" else value)
    if message == "Shape" and name == "kv_heads":
        c.shape.q_heads = value  # q_heads stays a multiple of kv_heads.


def expect(c: entrokv.SessionConfig, ok: bool, field: str) -> None:
    if ok:
        entrokv.validate_config(c)
        return
    with pytest.raises(EntroKvError) as e:
        entrokv.validate_config(c)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.message.startswith(f"{field}: "), e.value.message


def config_bounds():
    out = []
    for key, comment in sorted(field_comments().items()):
        message, name = key.split(".")
        if message in PATHS and (m := _BOUND.search(comment)):
            out.append((message, name, (bool(m.group(1)),) + m.group(2, 3, 4, 5)))
    return out


def test_the_proto_states_the_config_bounds():
    # Every bounded config field of bounds_test.cc's list, at least.
    assert len(config_bounds()) >= 20


@pytest.mark.parametrize("message,name,bound", config_bounds(),
                         ids=[f"{m}.{n}" for m, n, _ in config_bounds()])
def test_config_field_accepts_its_bound_and_rejects_the_past_value(message, name, bound):
    integer = is_integer(message, name)
    field = f"{PATHS[message]}.{name}" if PATHS[message] else name
    for value, ok in probes(bound, integer):
        c = base_config()
        set_field(c, message, name, int(value) if integer else float(value))
        expect(c, ok, field)


def test_shape_products_accept_their_bound_and_reject_the_past_value():
    with open(PROTO, encoding="utf-8") as f:
        m = re.search(r"Product bound:\s*\[1,\s*2\^(\d+)\]", f.read())
    assert m, "no product bound in the proto"
    limit, most = 1 << int(m.group(1)), 65536
    a = next(f for f in range(2, most + 1)
             if (limit + 1) % f == 0 and (limit + 1) // f <= most)
    b = (limit + 1) // a
    cases = [  # layers, kv_heads, q_heads, head_dim, sketch_dim, query_form
        (limit // most, 1, 1, most, 0, "per_head"),
        (a, 1, 1, b, 0, "per_head"),
        (1, 1, a, b, 0, "per_head"),
        (1, 1, a, b, 0, "group_sum"),
        (2 * limit // most, 1, 1, most, most // 2, "per_head"),
        (2 * limit // most, 1, 1, most, most // 2 + 1, "per_head"),
    ]
    verdicts = []
    for layers, kv, q, hd, sk, form in cases:
        dim = sk or hd
        ok = (layers * kv * dim <= limit
              and layers * (kv if form == "group_sum" else q) * dim <= limit)
        verdicts.append(ok)
        c = base_config()
        c.shape = Shape(layers=layers, kv_heads=kv, q_heads=q, head_dim=hd,
                        sketch_dim=sk, query_form=form, element_type="f32")
        expect(c, ok, "shape")
    assert verdicts.count(True) == 3 and verdicts.count(False) == 3

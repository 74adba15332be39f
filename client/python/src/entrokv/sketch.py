"""Key and query sketches (project:r), bit for bit as core/src/sketch.cc.

The default projection of a (model layer, kv head) is a seeded random
head_dim x r matrix with orthonormal columns, built from SplitMix64 with only
+, -, *, / and sqrt in double, so that this module reproduces C++'s bits:
every sum below runs in C++'s order (numpy's pairwise `sum` is never used on
them) and no fused multiply-add is involved.
"""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from .config import SessionConfig
from .errors import invalid

_M64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64 of a 64-bit value (docs/step-semantics.md section 7)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _splitmix64_array(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _seq_dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum_j a[j]*b[j], j ascending (np.add.accumulate is sequential)."""
    return float(np.add.accumulate(a * b)[-1])


@functools.lru_cache(maxsize=1024)
def _default_projection(seed: int, model_layer: int, kv_head: int,
                        head_dim: int, r: int) -> np.ndarray:
    d = head_dim
    key = (seed ^ (((model_layer & 0xFFFFFFFF) << 32) | (kv_head & 0xFFFFFFFF))) & _M64
    base = splitmix64(key)
    with np.errstate(over="ignore"):
        t = np.uint64(base) + np.arange(r * d * 12, dtype=np.uint64)
    u = (_splitmix64_array(t) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    u = u.reshape(r, d, 12)  # [c][j][m]: c outer, j inner, 12 draws each.
    g = np.zeros((r, d), np.float64)
    for m in range(12):
        g = g + u[:, :, m]
    cols = g - 6.0  # cols[c] is column c of P.
    for c in range(r):
        for prev in range(c):
            dot = _seq_dot(cols[c], cols[prev])
            cols[c] = cols[c] - dot * cols[prev]
        norm = np.sqrt(np.float64(_seq_dot(cols[c], cols[c])))
        cols[c] = cols[c] / norm
    p = np.ascontiguousarray(cols.T)  # [j][c]
    p.setflags(write=False)
    return p


def default_projection(seed: int, model_layer: int, kv_head: int,
                       head_dim: int, r: int) -> np.ndarray:
    """C++'s DefaultProjection: head_dim x r float64, orthonormal columns.
    REQUIRES 1 <= r <= head_dim."""
    if not 1 <= r <= head_dim:
        raise invalid(f"shape.sketch_dim: {r} is outside [1, head_dim {head_dim}]")
    return _default_projection(int(seed) & _M64, int(model_layer), int(kv_head),
                               int(head_dim), int(r))


def _project(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """p [planes, d, r], v [..., planes, rows, d] (float64) -> [..., planes,
    rows, r] float32: acc[c] = acc[c] + p[j][c] * v[j] for j ascending, a
    multiply then an add in double, then rounded to float: the arithmetic of
    sketch_project.h, bit for bit. One numpy step per j covers every plane,
    row and token; a matmul would be faster still but sums in its own order
    (and may fuse), which would break the bit-identity with C++."""
    d, r = p.shape[1], p.shape[2]
    acc = np.zeros(v.shape[:-1] + (r,), np.float64)
    term = np.empty_like(acc)
    for j in range(d):
        np.multiply(p[:, None, j, :], v[..., j, None], out=term)
        acc += term
    return acc.astype(np.float32)


class Sketcher:
    """What the engine's side does to keys and queries before they travel."""

    def __init__(self, config: SessionConfig,
                 projection: Optional[np.ndarray] = None):
        self.shape = config.shape
        s = config.shape
        self.identity = s.sketch_dim == 0 and s.query_form == "per_head"
        # [plane = layer * kv_heads + kv head][j][c], float64.
        self._matrices = np.zeros((0, 0, 0), np.float64)
        if s.sketch_dim == 0:
            if projection is not None and np.asarray(projection).size:
                raise invalid("projection: matrices given for an exact "
                              "(unsketched) session")
            return
        d, r = s.head_dim, s.sketch_dim
        planes = s.layers * s.kv_heads
        if projection is not None and np.asarray(projection).size:
            m = np.asarray(projection, dtype=np.float32).reshape(-1)
            if m.size != planes * d * r:
                raise invalid(f"projection: {m.size} elements, expected {planes} "
                              f"(layers x kv heads) x {d} x {r}")
            bad = np.flatnonzero(~np.isfinite(m))
            if bad.size:
                raise invalid(f"projection: non-finite element {int(bad[0])}")
            self._matrices = m.astype(np.float64).reshape(planes, d, r)
            return
        matrices = []
        for l in range(s.layers):
            layer = config.scored_layers[l] if config.scored_layers else l
            for g in range(s.kv_heads):
                matrices.append(
                    default_projection(config.projection_seed, layer, g, d, r))
        self._matrices = np.stack(matrices)

    def keys(self, keys: np.ndarray, n: int) -> np.ndarray:
        """float32 [n][layer][kv][head_dim] (flat) -> [n][layer][kv][r]."""
        s = self.shape
        if s.sketch_dim == 0:
            return keys
        planes = s.layers * s.kv_heads
        v = keys.reshape(n, planes, 1, s.head_dim).astype(np.float64)
        return _project(self._matrices, v).reshape(-1)

    def queries(self, queries: np.ndarray) -> np.ndarray:
        """float32 [layer][q_head][head_dim] (flat) -> the wire form."""
        if self.identity:
            return queries
        s = self.shape
        d, group = s.head_dim, s.group_size
        q = queries.reshape(s.layers, s.kv_heads, group, d)
        sketched = s.sketch_dim > 0
        if s.query_form == "group_sum":
            v = np.zeros((s.layers, s.kv_heads, 1, d), np.float64)
            for h in range(group):
                v[:, :, 0, :] += q[:, :, h, :].astype(np.float64)
        else:
            v = q.astype(np.float64)
        if not sketched:
            return v.astype(np.float32).reshape(-1)
        planes = s.layers * s.kv_heads
        return _project(self._matrices, v.reshape(planes, -1, d)).reshape(-1)

"""stories260K in PyTorch, with a KV cache that really frees the slots entrokv
names, driven through the entrokv Python client.

The PyTorch counterpart of eval/tinyllama (C++): the same llama2.c
checkpoint and tokenizer (../shared/data/tinystories), the same forward pass
(RMSNorm eps 1e-5, RoPE from the checkpoint's freq_cis tables, GQA attention over
the live cache entries in append order, SwiGLU, shared classifier), the same cache
(lowest free slot first; keys keep their RoPE position) and the same
teacher-forced loop (evaluator.h): forward token t, add -log p_t(token t+1),
send step t (its slot, every layer's post-RoPE keys and queries, H(p_t)), free
the answered slots before token t+1.

    /usr/bin/python3 client/examples/torch_tinyllama/tinyllama.py \
        --server unix:/tmp/entrokv.sock --policy window --budget 32 --stories 3
"""

from __future__ import annotations

import argparse
import math
import os
import struct
import sys
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import torch

BOS_ID = 1
FIRST_BYTE_ID = 3
NEVER = 2 ** 31 - 1


def data_dir(flag: str = "") -> str:
    if flag:
        return flag
    if os.environ.get("ENTROKV_DATA"):
        return os.environ["ENTROKV_DATA"]
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "..", "shared",
                                         "data", "tinystories"))


@dataclass
class Config:
    dim: int
    hidden_dim: int
    layers: int
    heads: int
    kv_heads: int
    vocab_size: int
    seq_len: int

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim


class Model:
    """The llama2.c legacy (version 0) checkpoint, shared classifier."""

    def __init__(self, path: str):
        raw = open(path, "rb").read()
        c = Config(*struct.unpack("<7i", raw[:28]))
        if c.vocab_size <= 0:
            raise ValueError("model: the classifier must be shared (vocab_size > 0)")
        self.c = c
        w = torch.from_numpy(np.frombuffer(raw, dtype="<f4", offset=28).copy())
        at = 0

        def take(*shape):
            nonlocal at
            n = int(np.prod(shape))
            t = w[at:at + n].reshape(shape)
            at += n
            return t

        L, d, hd, kv = c.layers, c.dim, c.hidden_dim, c.kv_dim
        self.emb = take(c.vocab_size, d)
        self.rms_att = take(L, d)
        self.wq = take(L, d, d)
        self.wk = take(L, kv, d)
        self.wv = take(L, kv, d)
        self.wo = take(L, d, d)
        self.rms_ffn = take(L, d)
        self.w1 = take(L, hd, d)
        self.w2 = take(L, d, hd)
        self.w3 = take(L, hd, d)
        self.rms_final = take(d)
        self.cos = take(c.seq_len, c.head_dim // 2)
        self.sin = take(c.seq_len, c.head_dim // 2)
        if at != w.numel():
            raise ValueError(f"model: {w.numel() - at} floats after the last tensor")

    def new_cache(self) -> "KvCache":
        return KvCache(self.c.layers, self.c.kv_dim, self.c.seq_len)

    @staticmethod
    def _rms(x, weight):
        ss = (x * x).mean() + 1e-5
        return weight * (x * (1.0 / torch.sqrt(ss)))

    def _rope(self, v, position):
        c, s = self.cos[position], self.sin[position]
        v = v.reshape(-1, self.c.head_dim // 2, 2)
        a, b = v[..., 0], v[..., 1]
        return torch.stack([a * c - b * s, a * s + b * c], dim=-1).reshape(-1)

    @torch.no_grad()
    def forward(self, token: int, position: int, cache: "KvCache"):
        """Appends the token's keys/values (one new slot), attends over every
        live entry, returns (logits, queries [L][heads][hd], keys [L][kv][hd],
        slot)."""
        c = self.c
        slot = cache.append(position)
        hd, group = c.head_dim, c.heads // c.kv_heads
        x = self.emb[token].clone()
        qs, ks = [], []
        live = torch.tensor(cache.live_slots())  # One index for every layer.
        for l in range(c.layers):
            xb = self._rms(x, self.rms_att[l])
            q = self._rope(self.wq[l] @ xb, position)
            k = self._rope(self.wk[l] @ xb, position)
            v = self.wv[l] @ xb
            cache.k[l, slot] = k
            cache.v[l, slot] = v
            qs.append(q.reshape(c.heads, hd))
            ks.append(k.reshape(c.kv_heads, hd))
            K = cache.k[l, live].reshape(-1, c.kv_heads, hd)
            V = cache.v[l, live].reshape(-1, c.kv_heads, hd)
            qh = q.reshape(c.kv_heads, group, hd)
            att = torch.einsum("kgd,nkd->kgn", qh, K) / math.sqrt(hd)
            att = torch.softmax(att, dim=-1)
            out = torch.einsum("kgn,nkd->kgd", att, V).reshape(-1)
            x = x + self.wo[l] @ out
            xb = self._rms(x, self.rms_ffn[l])
            h1 = self.w1[l] @ xb
            h = torch.nn.functional.silu(h1) * (self.w3[l] @ xb)
            x = x + self.w2[l] @ h
        x = self._rms(x, self.rms_final)
        logits = self.emb @ x
        return logits, torch.stack(qs), torch.stack(ks), slot


class KvCache:
    """Fixed slots; the lowest free one is taken; evicting really frees it
    (its keys and values are no longer attended to, the slot is reused)."""

    def __init__(self, layers: int, kv_dim: int, capacity: int):
        self.k = torch.zeros(layers, capacity, kv_dim)
        self.v = torch.zeros(layers, capacity, kv_dim)
        self.position = [-1] * capacity  # -1: free.
        self.capacity = capacity
        self.peak = 0

    def append(self, position: int) -> int:
        for slot in range(self.capacity):
            if self.position[slot] < 0:
                self.position[slot] = position
                self.peak = max(self.peak, self.live_count())
                return slot
        raise RuntimeError("cache: every slot is live")

    def evict(self, slot: int) -> int:
        if not 0 <= slot < self.capacity or self.position[slot] < 0:
            raise KeyError(f"cache: slot {slot} is not live")
        p = self.position[slot]
        self.position[slot] = -1
        return p

    def live_slots(self) -> List[int]:
        """Live slots in append (position) order."""
        return sorted((s for s in range(self.capacity) if self.position[s] >= 0),
                      key=lambda s: self.position[s])

    def live_count(self) -> int:
        return sum(1 for p in self.position if p >= 0)


class Tokenizer:
    """llama2.c's tokenizer file: BPE by score, byte fallback (tokenizer.cc)."""

    def __init__(self, path: str, vocab_size: int):
        raw = open(path, "rb").read()
        at = 4
        self.pieces: List[bytes] = []
        self.scores: List[float] = []
        self.ids = {}
        for i in range(vocab_size):
            score, length = struct.unpack_from("<fi", raw, at)
            at += 8
            piece = raw[at:at + length]
            at += length
            self.ids.setdefault(piece, i)
            self.pieces.append(piece)
            self.scores.append(score)

    def encode(self, text: str, bos: bool = True) -> List[int]:
        ids = [BOS_ID] if bos else []
        if not text:
            return ids
        first = len(ids)
        if b" " in self.ids:
            ids.append(self.ids[b" "])
        for ch in text:
            b = ch.encode("utf-8")
            if b in self.ids:
                ids.append(self.ids[b])
            else:
                ids.extend(FIRST_BYTE_ID + x for x in b)
        while True:
            best, best_id, best_at = -1e10, -1, 0
            for i in range(first, len(ids) - 1):
                j = self.ids.get(self.pieces[ids[i]] + self.pieces[ids[i + 1]], -1)
                if j >= 0 and self.scores[j] > best:
                    best, best_id, best_at = self.scores[j], j, i
            if best_id < 0:
                return ids
            ids[best_at:best_at + 2] = [best_id]


def load(d: str):
    """(Model, Tokenizer) of the data directory `d`."""
    model = Model(os.path.join(d, "stories260K.bin"))
    return model, Tokenizer(os.path.join(d, "tok512.bin"), model.c.vocab_size)


def load_stories(path: str, count: int) -> List[str]:
    text = open(path, encoding="utf-8").read()
    stories = [s.strip() for s in text.split("<|endoftext|>")]
    stories = [s for s in stories if s]
    return stories[:count] if count > 0 else stories


def nll_and_entropy(logits: torch.Tensor, target: int):
    """-log p(target) and H(p) in nats, in double (ops.cc)."""
    x = logits.double()
    m = x.max()
    log_sum = torch.log(torch.exp(x - m).sum())
    log_p = x - m - log_sum
    h = float(-(torch.exp(log_p) * log_p).sum())
    return float(m + log_sum - x[target]), max(h, 0.0)


@dataclass
class Result:
    nll_sum: float = 0.0
    predicted: int = 0
    live_sum: int = 0
    peak_live: int = 0
    evicted: int = 0
    evicted_at: List[int] = field(default_factory=list)  # Per position.
    fallback_steps: int = 0


def evaluate(model: Model, tokens: List[int], session=None, lag: int = 0) -> Result:
    """Teacher-forced NLL of `tokens` with `session` (an entrokv Session, or
    None for the full cache) deciding evictions, applied `lag` steps late."""
    cache = model.new_cache()
    r = Result(evicted_at=[NEVER] * (len(tokens) - 1))
    pending: List[List[int]] = []
    for t in range(len(tokens) - 1):
        logits, queries, keys, slot = model.forward(tokens[t], t, cache)
        r.live_sum += cache.live_count()
        nll, h = nll_and_entropy(logits, tokens[t + 1])
        r.nll_sum += nll
        if session is None:
            continue
        out = session.step([slot], keys, queries, entropy=h)
        r.fallback_steps += out.fallback
        pending.append(out.evicted)
        if len(pending) > lag:
            for s in pending.pop(0):
                r.evicted_at[cache.evict(s)] = t + 1
                r.evicted += 1
    r.predicted = len(tokens) - 1
    r.peak_live = cache.peak
    return r


def evaluate_policy(client, model: Model, tokens: List[int], policy: Optional[str],
                    budget: int, lag: int = 0) -> Result:
    """evaluate() with a new session of `policy` on `client` (None: the full
    cache, no session), closed afterwards."""
    if policy is None:
        return evaluate(model, tokens, None, lag)
    import entrokv
    c = model.c
    shape = entrokv.Shape(layers=c.layers, kv_heads=c.kv_heads, q_heads=c.heads,
                          head_dim=c.head_dim, element_type="f32")
    session = client.create_session(policy, budget=budget, shape=shape, placement="cpu")
    r = evaluate(model, tokens, session, lag)
    session.close()
    return r


def main(argv: Optional[List[str]] = None) -> int:
    import entrokv

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="")
    ap.add_argument("--server", default=None, help="entrokv target (default $ENTROKV_TARGET)")
    ap.add_argument("--policy", default="window")
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--stories", type=int, default=3)
    ap.add_argument("--max_tokens", type=int, default=256)
    ap.add_argument("--lag", type=int, default=0)
    ap.add_argument("--full", action="store_true", help="no eviction (full cache)")
    args = ap.parse_args(argv)
    d = data_dir(args.data)
    model, tok = load(d)
    client = entrokv.Client(args.server, step_deadline=5.0, create_deadline=5.0)
    total_nll = total_n = total_live = 0
    for i, story in enumerate(load_stories(os.path.join(d, "tinystories_valid_head.txt"),
                                           args.stories)):
        tokens = tok.encode(story)[:min(args.max_tokens, model.c.seq_len)]
        r = evaluate_policy(client, model, tokens, None if args.full else args.policy,
                            args.budget, args.lag)
        total_nll += r.nll_sum
        total_n += r.predicted
        total_live += r.live_sum
        print(f"story {i}: tokens {len(tokens)} nll {r.nll_sum:.6f} "
              f"mean_live {r.live_sum / r.predicted:.2f} evicted {r.evicted} "
              f"fallback {r.fallback_steps}")
    print(f"perplexity {math.exp(total_nll / total_n):.4f} "
          f"mean_live {total_live / total_n:.2f} counters {client.counters()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

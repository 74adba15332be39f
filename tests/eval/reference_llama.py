#!/usr/bin/python3
"""Independent reference for the tinyllama example engine (tests only).

A second implementation of stories260K and its tokenizer, written from the
llama2.c checkpoint description (docs/results-tinystories.md, "Data") in plain
numpy, float64 throughout. It shares no code with the C++ engine and differs
from it on purpose where it can: the whole sequence runs at once with a causal
mask, RoPE angles are computed here (the checkpoint's freq_cis tables are
ignored), and arithmetic is double precision.

Usage (run with Debian's /usr/bin/python3, which has python3-numpy):
  reference_llama.py --data DIR nll --stories N [--window W] [--sink]
                    [--recall]
      One line per story: "story INDEX TOKENS NLL_SUM" (NLL_SUM in nats over
      TOKENS-1 predictions). With --window W, the query at position s attends
      only to positions j with s - j <= W (and j == 0 as well with --sink).
      With --recall (and --window W, no --sink), a second line per story,
      "recall INDEX STEPS SUM ORACLE_SUM": the attention recall of the
      window's kept set after each position s < TOKENS-1 (positions s-W+1..s;
      the share of softmax(q_s . k_j / sqrt(head)), j <= s, per layer and
      head, averaged over them, that falls there), summed over those steps,
      and of the top-W positions by that averaged share (the oracle).
  reference_llama.py --data DIR encode FILE
      FILE holds texts separated by NUL bytes; prints one line of ids per text
      (BOS first).
"""

import argparse
import os
import struct
import sys

import numpy as np

BOS = 1
SEQ_LEN_LIMIT = 512


def load_model(path):
    with open(path, 'rb') as f:
        raw = f.read()
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack(
        '<7i', raw[:28])
    head = dim // heads
    data = np.frombuffer(raw, dtype='<f4', offset=28).astype(np.float64)
    shapes = [
        ('emb', (vocab, dim)), ('rms_att', (layers, dim)),
        ('wq', (layers, dim, dim)), ('wk', (layers, kv_heads * head, dim)),
        ('wv', (layers, kv_heads * head, dim)), ('wo', (layers, dim, dim)),
        ('rms_ffn', (layers, dim)), ('w1', (layers, hidden, dim)),
        ('w2', (layers, dim, hidden)), ('w3', (layers, hidden, dim)),
        ('rms_final', (dim,)), ('freq_real', (seq_len, head // 2)),
        ('freq_imag', (seq_len, head // 2)),
    ]
    w = {}
    at = 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        w[name] = data[at:at + n].reshape(shape)
        at += n
    assert at == data.size, 'unexpected checkpoint size'
    cfg = dict(dim=dim, hidden=hidden, layers=layers, heads=heads,
               kv_heads=kv_heads, vocab=vocab, seq_len=seq_len, head=head)
    return cfg, w


def rmsnorm(x, weight):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * weight


def rope(x, positions, head):
    # x: (T, n_heads, head). Pairs (2i, 2i+1) turn by pos * 10000^(-2i/head).
    inv = 10000.0 ** (-np.arange(0, head, 2, dtype=np.float64) / head)
    angle = positions[:, None].astype(np.float64) * inv[None, :]
    c = np.cos(angle)[:, None, :]
    s = np.sin(angle)[:, None, :]
    a = x[..., 0::2]
    b = x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def sequence_nll(cfg, w, tokens, window=None, sink=False, shares=None,
                 alternate=False):
    """Summed NLL. With `shares` (a list), appends per layer and head the
    (T, T) matrix of full causal softmax weights of the run's own q and k.
    With `alternate`, an odd position s attends s-1 and s only, an even one
    every j <= s (a tier that demotes all but the newest entry on even steps
    and promotes them all back on odd ones)."""
    t = len(tokens)
    head, heads, kvh = cfg['head'], cfg['heads'], cfg['kv_heads']
    pos = np.arange(t)
    s_idx = pos[:, None]
    j_idx = pos[None, :]
    allowed = j_idx <= s_idx
    if alternate:
        allowed = allowed & ((s_idx % 2 == 0) | (s_idx - j_idx <= 1))
    if window is not None:
        near = (s_idx - j_idx) <= window
        if sink:
            near = near | (j_idx == 0)
        allowed = allowed & near
    x = w['emb'][np.asarray(tokens)]
    for l in range(cfg['layers']):
        xb = rmsnorm(x, w['rms_att'][l])
        q = rope((xb @ w['wq'][l].T).reshape(t, heads, head), pos, head)
        k = rope((xb @ w['wk'][l].T).reshape(t, kvh, head), pos, head)
        v = (xb @ w['wv'][l].T).reshape(t, kvh, head)
        out = np.empty((t, heads, head))
        for h in range(heads):
            g = h // (heads // kvh)
            scores = (q[:, h, :] @ k[:, g, :].T) / np.sqrt(head)
            if shares is not None:
                full = np.where(j_idx <= s_idx, scores, -np.inf)
                full = np.exp(full - full.max(axis=1, keepdims=True))
                shares.append(full / full.sum(axis=1, keepdims=True))
            scores = np.where(allowed, scores, -np.inf)
            scores -= scores.max(axis=1, keepdims=True)
            p = np.exp(scores)
            p /= p.sum(axis=1, keepdims=True)
            out[:, h, :] = p @ v[:, g, :]
        x = x + out.reshape(t, -1) @ w['wo'][l].T
        xb = rmsnorm(x, w['rms_ffn'][l])
        h1 = xb @ w['w1'][l].T
        h3 = xb @ w['w3'][l].T
        x = x + ((h1 / (1.0 + np.exp(-h1))) * h3) @ w['w2'][l].T
    x = rmsnorm(x, w['rms_final'])
    logits = x @ w['emb'].T
    m = logits.max(axis=1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    targets = np.asarray(tokens[1:])
    return float(-logp[np.arange(t - 1), targets].sum())


class Tokenizer:
    def __init__(self, path, vocab_size):
        with open(path, 'rb') as f:
            raw = f.read()
        at = 4
        self.pieces = []
        self.scores = []
        for _ in range(vocab_size):
            score, n = struct.unpack('<fi', raw[at:at + 8])
            at += 8
            self.pieces.append(raw[at:at + n])
            at += n
            self.scores.append(score)
        assert at == len(raw), 'unexpected tokenizer size'
        self.ids = {}
        for i, p in enumerate(self.pieces):
            self.ids.setdefault(p, i)

    def encode(self, text):
        ids = [BOS]
        if not text:
            return ids
        seq = [self.ids[b' ']]
        for ch in text:
            b = ch.encode('utf-8')
            if b in self.ids:
                seq.append(self.ids[b])
            else:
                seq.extend(byte + 3 for byte in b)
        while True:
            best = None  # (score, index, id)
            for i in range(len(seq) - 1):
                cand = self.ids.get(self.pieces[seq[i]] + self.pieces[seq[i + 1]])
                if cand is not None and (best is None or
                                         self.scores[cand] > best[0]):
                    best = (self.scores[cand], i, cand)
            if best is None:
                break
            _, i, cand = best
            seq[i:i + 2] = [cand]
        return ids + seq


def stories(data_dir, n):
    with open(os.path.join(data_dir, 'tinystories_valid_head.txt'),
              encoding='utf-8') as f:
        parts = [p.strip() for p in f.read().split('<|endoftext|>')]
    return [p for p in parts if p][:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', required=True)
    sub = ap.add_subparsers(dest='cmd', required=True)
    nll = sub.add_parser('nll')
    nll.add_argument('--stories', type=int, default=3)
    nll.add_argument('--window', type=int, default=None)
    nll.add_argument('--sink', action='store_true')
    nll.add_argument('--alternate', action='store_true')
    nll.add_argument('--recall', action='store_true')
    enc = sub.add_parser('encode')
    enc.add_argument('file')
    args = ap.parse_args()

    cfg, w = load_model(os.path.join(args.data, 'stories260K.bin'))
    tok = Tokenizer(os.path.join(args.data, 'tok512.bin'), cfg['vocab'])
    if args.cmd == 'encode':
        with open(args.file, 'rb') as f:
            texts = f.read().decode('utf-8').split('\0')
        for text in texts:
            print(' '.join(str(i) for i in tok.encode(text)))
        return 0
    for i, story in enumerate(stories(args.data, args.stories)):
        ids = tok.encode(story)[:min(SEQ_LEN_LIMIT, cfg['seq_len'])]
        shares = [] if args.recall else None
        total = sequence_nll(cfg, w, ids, args.window, args.sink, shares,
                             args.alternate)
        print('story %d %d %.12f' % (i, len(ids), total))
        if args.recall:
            a = np.mean(shares, axis=0)  # (T, T): a[s, j], rows sum to 1.
            steps = len(ids) - 1
            kept = oracle = 0.0
            for s in range(steps):
                kept += a[s, max(0, s - args.window + 1):s + 1].sum()
                oracle += np.sort(a[s, :s + 1])[-args.window:].sum()
            print('recall %d %d %.12f %.12f' % (i, steps, kept, oracle))
    return 0


if __name__ == '__main__':
    sys.exit(main())

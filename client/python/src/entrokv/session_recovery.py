"""The recovery of a degraded Session (client/src/session_recovery.cc; the
contract is Session's docstring): when its time has come and the channel
is READY (unlike C++, no health check is awaited), one attempt creates a
new server session, attaches it and reads the live entries' keys from the
engine's ``live_keys``; the next step re-sends them.

SessionRecovery is Session's recovery half, a base class of Session that
works on Session's state (its fields and _validate, _fallback_local); it is
not used alone. Thread-safety: as Session's.
"""

from __future__ import annotations

import math
import time
from typing import List, Optional

import grpc

from .background_calls import POKE_EVERY, READY
from .config import policy_needs_entropy, ranking_needs_queries
from .decode_stream import DecodeStream
from .errors import EntroKvError, invalid
from .session_setup import attach_on, create_server_session
from .vectors import as_vector, convert, pinned_list, slot_list, to_float32


class SessionRecovery:
    """The recovery methods of Session (see the module docstring)."""

    def _jittered(self, wait: float) -> float:
        j = self._recovery_jitter
        if j == 0.0 or math.isinf(wait):
            return wait
        return wait * (1.0 + self._random.uniform(-j, j))

    def _recovery_failed(self) -> None:
        self._recovery_wait = min(self._recovery_wait * 2,
                                  self._max_recovery_interval)
        self._next_recovery = time.monotonic() + self._jittered(self._recovery_wait)

    def _recovery_accepts(self, slot_ids, keys, queries, entropy, logits,
                          pinned) -> bool:
        """Whether the step suits the new server session's first step: it
        is valid, and carries queries (and the entropy the policy reads)
        when that first step decides, whatever the old cadence said."""
        try:
            ids = slot_list(slot_ids)
            flags = pinned_list(pinned)
            k, _ = as_vector(keys, "append.keys")
            q, _ = as_vector(queries, "queries")
            self._validate(ids, flags, k, q, entropy, logits)
            has_logits = (logits is not None
                          and as_vector(logits, "logits")[0].size > 0)
        except EntroKvError:
            return False
        c = self._config
        decides = c.decide_every <= 1 or (
            c.hard_ceiling > 0 and len(self._live) + len(ids) > c.hard_ceiling)
        if not decides:
            return True
        # keydiff reads no query: its decisions may come without them.
        if ranking_needs_queries(c.ranking) and q.size != c.shape.full_query_elements():
            return False
        return not policy_needs_entropy(c) or entropy is not None or has_logits

    def _maybe_recover(self, slot_ids, keys, queries, entropy, logits,
                       pinned) -> None:
        """Before a step of a degraded session: when its time has come, the
        channel is connected and the step suits the new server session, one
        recovery attempt within create_deadline."""
        if self._live_keys is None:
            return
        now = time.monotonic()
        if now < self._next_recovery:
            return
        # GetState(try_to_connect): an idle channel starts connecting. A
        # channel that is not READY is poked (BackgroundCalls.poke): grpcio
        # has no background poller, so without a call in flight a connection
        # attempt makes no progress until gRPC's 5 s backup poll.
        state = self._client._channel_state(try_to_connect=True)
        if state != READY and now >= self._next_poke:
            self._client._poke()
            self._next_poke = now + POKE_EVERY
        if state != READY:
            return
        if not self._recovery_accepts(slot_ids, keys, queries, entropy, logits,
                                      pinned):
            return
        self._counters.recovery_attempts += 1
        try:
            self._recover(time.monotonic() + self._create_deadline)
        except EntroKvError:
            self._recovery_failed()

    def _resync_keys(self, slots: List[int]) -> bytes:
        """The live entries' keys from live_keys, in wire form."""
        if not slots:
            return b""
        try:
            got = self._live_keys(list(slots))
            k, kind = as_vector(got, "live_keys")
        except EntroKvError as e:
            raise EntroKvError(e.code, "live_keys: " + e.message) from None
        except Exception as e:  # The engine's callback: any failure aborts.
            raise EntroKvError(grpc.StatusCode.UNKNOWN, f"live_keys: {e!r}") from None
        n = len(slots)
        expected = n * self._config.shape.full_key_elements()
        if k.size != expected:
            raise invalid(f"live_keys: {k.size} floats for {n} entries, expected "
                          f"{expected} (entries x layers x kv_heads x head_dim)")
        wire = self._config.shape.element_type
        if self._sketcher.identity:
            return convert(k, kind, wire).tobytes()
        sk = self._sketcher.keys(to_float32(k, kind), n)
        return convert(sk, "f32", wire).tobytes()

    def _recover(self, deadline: float) -> None:
        """One attempt; raises EntroKvError when it fails (the new server
        session, if any, is then closed in the background)."""
        # The steps in flight are settled locally now, so that the live
        # entries re-sent are those the engine holds once it applied them.
        for pending in self._in_flight:
            if pending.decided is None:
                pending.decided = self._fallback_local(pending)
        client = self._client
        # The server first: most failed attempts are its, and they should
        # not cost the engine a copy of its keys.
        new_id, effective = create_server_session(client._stub, self._requested,
                                                  deadline,
                                                  shadowing=self._shadowing)
        batch = self._batch
        stream: Optional[DecodeStream] = None
        try:
            # A batch first reads the answers in flight; the attach's time
            # starts after them (as C++).
            drain_start = time.monotonic()
            if batch is not None:
                via = batch._live_stream()
            else:
                stream = DecodeStream(client._stub)
                via = stream
            try:
                attach_on(via, new_id, deadline + time.monotonic() - drain_start)
            except EntroKvError:
                if batch is not None:
                    batch._end_stream()
                raise
            slots, flags = self._live.entries()
            keys = self._resync_keys(slots)
        except EntroKvError:
            if stream is not None:
                stream.cancel()
            client._close_in_background(new_id)
            raise
        # Online again, under the new id. The old server session's state no
        # longer matches the engine's cache: close it.
        if self._id:
            client._close_in_background(self._id)
        self._id = new_id
        self._config = effective
        self._stream = stream  # None for a session of a DecodeBatch.
        if batch is not None:
            self._batch_generation = batch._generation
        # The new server session numbers its steps on from the engine's next
        # one and counts them from zero (the decision cadence restarts).
        self._first_step = self._next_step
        self._steps_done = 0
        self._degraded = False
        self._degraded_reason = None
        self._offline = False
        self._next_recovery = math.inf
        self._resync = (slots, flags, keys)

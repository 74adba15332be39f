"""DecodeBatch: the steps of many sessions in one Decode message (the C++
library's batch.h)."""

from __future__ import annotations

import collections
import math
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Deque, List, Optional, Sequence, Tuple, Union

import grpc

from ._stubs import pb2
from .client import Client
from .config import SessionConfig
from .decode_stream import DecodeStream
from .errors import EntroKvError, invalid
from .session import Session, StepOutcome


@dataclass
class BatchStep:
    """One session's step in a DecodeBatch.step call (the arguments of
    Session.step)."""

    session: Session
    slot_ids: Any
    keys: Any
    queries: Any = None
    entropy: Optional[float] = None
    logits: Any = None
    pinned: Any = None


@dataclass
class _Message:
    """A message of the per-session calls' steps: gathered, sent, answered."""

    generation: int  # The stream it was gathered for.
    request: Any = field(default_factory=pb2.DecodeRequest)
    # (session, its _Pending) per step in the request, in order.
    entries: List[Tuple[Session, Any]] = field(default_factory=list)
    # Every session that gathered a step into it (sent or decided locally).
    members: set = field(default_factory=set)
    deadline: float = math.inf  # The smallest step_deadline of its sessions.
    sent: float = 0.0
    # (response, error) once read: exactly one of them is None.
    answer: Optional[Tuple[Any, Optional[EntroKvError]]] = None


class DecodeBatch:
    """The steps of many sessions in one Decode message (batch.h).

    Sessions created through it are attached to its stream. They step either
    through ``step()``, one call for the whole decode iteration, or with
    their own calls (``step``, ``step_pipelined``, ``step_async``/``collect``,
    ``flush``), which the batch gathers into one message per iteration (as
    batch.h's "Steps of the per-session calls"). A message of gathered steps
    is sent when every open session of the batch has gathered a step, when a
    call needs the answer of a gathered step (``collect``, ``step``), when a
    session gathers its next step, or when ``step()`` runs (the gathered
    steps go first, in a message of their own). Answers are read in order;
    an attach (a new session, a recovery) first reads the answers in flight,
    and its create deadline counts from then. close(), counters() and
    live_slots() work as usual; close() takes the session's gathered step
    out of its message (C++ leaves it in).

    Each entry is validated and fails on its own; the deadline of a message
    is the smallest step_deadline of the sessions in it, counted from its
    send (step() sends at once, behind the messages in flight). When it passes or the stream breaks, every session in the message
    decides locally and is degraded (they share the stream, which is then
    ended, with every message in flight on it; the next message goes on a
    new one, which recovered sessions attach to). One message carries at
    most the server's --max_steps_per_message steps (1024 by default): split
    larger decode batches over several batches. Used by one thread at a
    time.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._stream = DecodeStream(client._stub)
        self._ended = False
        # Counts the streams that ended: a session attached to an earlier
        # one is no longer attached.
        self._generation = 0
        # The batch's sessions (the open ones are those not closed).
        self._sessions: "weakref.WeakSet[Session]" = weakref.WeakSet()
        self._gathering: Optional[_Message] = None
        self._flying: Deque[_Message] = collections.deque()

    def _live_stream(self) -> DecodeStream:
        """The batch's stream with its answers in flight read, for an attach
        or a step() whose answer is read next (a new stream when the last
        one ended)."""
        self._read_flying(None)
        return self._current_stream()

    def _current_stream(self) -> DecodeStream:
        """The batch's stream (a new one when the last one ended)."""
        if self._ended:
            self._stream = DecodeStream(self._client._stub)
            self._ended = False
        return self._stream

    def _end_stream(self) -> None:
        # A late response must never be read as the answer to a later
        # message: the stream goes, and with it every attachment to it and
        # every message in flight on it.
        self._stream.cancel()
        self._ended = True
        self._generation += 1
        ended = EntroKvError(grpc.StatusCode.UNAVAILABLE,
                             "entrokv: the DecodeBatch's stream ended")
        while self._flying:
            self._flying.popleft().answer = (None, ended)

    # -- The per-session calls' steps ---------------------------------------

    def _gather(self, session: Session, slot_ids, keys, queries, entropy,
                logits, pinned) -> None:
        """Session.step_async of a session of this batch: its step joins
        the message being gathered."""
        m = self._gathering
        if m is not None and id(session) in m.members:
            self._send_gathered()  # Its next step: the message goes first.
        wire = session._prepare_for_batch(
            slot_ids, keys, queries, entropy, logits, pinned,
            lambda: self._gathering_message().request.steps)
        m = self._gathering_message()
        m.members.add(id(session))
        if wire is not None:
            pending = session._in_flight[-1]
            pending.message = m
            pending.index = len(m.entries)
            m.entries.append((session, pending))
            m.deadline = min(m.deadline, session._step_deadline)
        self._send_if_complete()

    def _gathering_message(self) -> _Message:
        """The message being gathered for the stream now (one gathered for a
        stream that has ended is sent first: answered with that end)."""
        if (self._gathering is not None
                and self._gathering.generation != self._generation):
            self._send_gathered()
        if self._gathering is None:
            self._gathering = _Message(self._generation)
        return self._gathering

    def _send_if_complete(self) -> None:
        m = self._gathering
        if m is None:
            return
        if all(id(s) in m.members for s in self._sessions if not s._closed):
            self._send_gathered()

    def _send_gathered(self) -> None:
        """Sends the message being gathered (its answer is an error when the
        stream its sessions were attached to has ended)."""
        m, self._gathering = self._gathering, None
        if m is None or not m.entries:
            return
        if m.generation != self._generation:
            m.answer = (None, EntroKvError(
                grpc.StatusCode.UNAVAILABLE,
                "entrokv: the DecodeBatch's stream ended while the step was "
                "gathered"))
            return
        m.sent = time.monotonic()
        self._current_stream().send(m.request)
        self._flying.append(m)

    def _read_flying(self, until: Optional[_Message]) -> None:
        """Reads the answers in flight, in order: all of them, or up to
        `until`'s."""
        while self._flying:
            m = self._flying[0]
            try:
                response = self._stream.next(m.sent + m.deadline)
            except EntroKvError as e:
                self._flying.popleft()
                m.answer = (None, e)
                self._end_stream()  # Every later message: the stream ended.
                return
            self._flying.popleft()
            if len(response.results) != len(m.request.steps):
                m.answer = (None, EntroKvError.internal(
                    f"entrokv: a batch response with {len(response.results)} "
                    f"results for {len(m.request.steps)} steps"))
                self._end_stream()
                return
            m.answer = (response, None)
            if m is until:
                return

    def _answer(self, m: _Message) -> Tuple[Any, Optional[EntroKvError]]:
        """The answer to a gathered step's message, sending and reading what
        it takes."""
        if m is self._gathering:
            self._send_gathered()
        if m.answer is None:
            self._read_flying(m)
        if m.answer is None:  # pragma: no cover - defensive
            return None, EntroKvError.internal("entrokv: a step was never sent")
        return m.answer

    def _forget(self, session: Session) -> None:
        """A session of the batch closed: its gathered step leaves the
        message, which may now be complete."""
        m = self._gathering
        if m is None:
            return
        m.members.discard(id(session))
        kept = [(s, p) for s, p in m.entries if s is not session]
        if len(kept) != len(m.entries):
            request = pb2.DecodeRequest()
            for i, (s, p) in enumerate(kept):
                request.steps.add().CopyFrom(m.request.steps[p.index])
                p.index = i
            m.request = request
            m.entries = kept
        self._send_if_complete()

    def create_session(self, config: Union[SessionConfig, str, None] = None,
                       **kwargs: Any) -> Session:
        """As Client.create_session, the session attached to this batch's
        stream (an unreachable server gives an offline session)."""
        session = self._client.create_session(config, _batch=self, **kwargs)
        session._batch = self
        self._sessions.add(session)
        return session

    def step(self, steps: Sequence[BatchStep]) -> List[Union[StepOutcome, EntroKvError]]:
        """Sends one step per entry (each session at most once) in one
        message; returns, in order, each step's outcome or its error. Steps
        the sessions' own calls gathered are sent first, in a message of
        their own; a session with a step in flight fails its entry."""
        self._send_gathered()
        out: List[Union[StepOutcome, EntroKvError]] = [
            EntroKvError.internal("entrokv: not stepped")] * len(steps)
        message = pb2.DecodeRequest()
        index = [-1] * len(steps)
        prepared = [False] * len(steps)
        generation_at_start = self._generation
        seen = set()
        deadline = math.inf
        for i, st in enumerate(steps):
            session = st.session
            if not isinstance(session, Session) or session._batch is not self:
                out[i] = invalid(f"steps[{i}].session: not a session of this DecodeBatch")
                continue
            if id(session) in seen:
                out[i] = invalid(f"steps[{i}].session: appears twice in the batch")
                continue
            seen.add(id(session))
            try:
                wire = session._prepare_batched(st, lambda: message.steps)
            except EntroKvError as e:
                out[i] = e
                continue
            prepared[i] = True
            if wire is not None:
                index[i] = len(message.steps) - 1
                deadline = min(deadline, session._step_deadline)
        response, error = None, None
        if self._generation != generation_at_start:
            # A recovery's attach failed above and ended the stream the
            # sessions prepared before it were attached to.
            error = EntroKvError(
                grpc.StatusCode.UNAVAILABLE,
                "entrokv: the DecodeBatch's stream ended while the step was prepared")
        elif len(message.steps) > 0:
            # Sent at once, behind any message in flight on the same stream
            # (as C++ does): its deadline counts from its own send, and when
            # a message ahead of it fails, the stream ends with this one in
            # flight, whose sessions then decide locally.
            m = _Message(self._generation, request=message, deadline=deadline,
                         sent=time.monotonic())
            self._current_stream().send(message)
            self._flying.append(m)
            response, error = self._answer(m)
        else:
            error = EntroKvError(grpc.StatusCode.UNAVAILABLE, "entrokv: nothing was sent")
        # Every session's record is settled before any tier callback runs, so
        # that a callback that raises leaves no other session's step in flight.
        settled = []
        for i, st in enumerate(steps):
            if not prepared[i]:
                continue
            try:
                out[i] = st.session._settle_batched(response, error, index[i])
                settled.append(i)
            except EntroKvError as e:
                out[i] = e
        # Every session's callbacks run; the first exception one raises is
        # raised after the last.
        raised = None
        for i in settled:
            try:
                steps[i].session._deliver(out[i])
            except Exception as e:  # pylint: disable=broad-except
                if raised is None:
                    raised = e
        if raised is not None:
            raise raised
        return out

"""DecodeBatch: the steps of many sessions in one Decode message (the C++
library's batch.h)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Union

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


class DecodeBatch:
    """The steps of many sessions in one Decode message (batch.h).

    Sessions created through it are attached to its stream and step only
    through ``step()``; close(), counters() and live_slots() work as usual.
    Each entry is validated and fails on its own; the deadline of a message
    is the smallest step_deadline of the sessions in it. When it passes or
    the stream breaks, every session in the message decides locally and is
    degraded (they share the stream, which is then ended; the next message
    goes on a new one, which recovered sessions attach to). One
    message carries at most the server's --max_steps_per_message steps
    (1024 by default): split larger decode batches over several batches.
    Used by one thread at a time.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._stream = DecodeStream(client._stub)
        self._ended = False
        # Counts the streams that ended: a session attached to an earlier
        # one is no longer attached.
        self._generation = 0

    def _live_stream(self) -> DecodeStream:
        """The batch's stream; a new one when the last one ended."""
        if self._ended:
            self._stream = DecodeStream(self._client._stub)
            self._ended = False
        return self._stream

    def _end_stream(self) -> None:
        # A late response must never be read as the answer to a later
        # message: the stream goes, and with it every attachment to it.
        self._stream.cancel()
        self._ended = True
        self._generation += 1

    def create_session(self, config: Union[SessionConfig, str, None] = None,
                       **kwargs: Any) -> Session:
        """As Client.create_session, the session attached to this batch's
        stream (an unreachable server gives an offline session)."""
        session = self._client.create_session(config, _batch=self, **kwargs)
        session._batch = self
        return session

    def step(self, steps: Sequence[BatchStep]) -> List[Union[StepOutcome, EntroKvError]]:
        """Sends one step per entry (each session at most once) in one
        message; returns, in order, each step's outcome or its error."""
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
            wire = message.steps.add()
            try:
                sent = session._prepare_batched(st, wire)
            except EntroKvError as e:
                del message.steps[-1]
                out[i] = e
                continue
            if not sent:
                del message.steps[-1]
            prepared[i] = True
            if sent:
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
            until = time.monotonic() + deadline
            stream = self._live_stream()
            stream.send(message)
            try:
                response = stream.next(until)
            except EntroKvError as e:
                error = e
            if error is not None or len(response.results) != len(message.steps):
                self._end_stream()
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

"""Session: one sequence's handle on an entrokv sidecar, made by
Client.create_session or Client.attach (the Python counterpart of
client/include/entrokv/client/session.h and client/src/session.cc; recovery
is in session_recovery.py, as session_recovery.cc), with the same
guarantees but one (no health check before a recovery attempt: see Session):

- Step numbers are assigned by the Session (first_step, then +1 per accepted
  step); a step the server rejects leaves the session unchanged and its number
  is reused by the next step.
- Every step has a deadline (``step_deadline``, counted from its send). When it
  passes, the stream breaks, or the session is offline, the step is decided
  locally with the ``streaming`` rule (sinks, pinned and most recent entries
  kept, the oldest of the rest evicted down to the budget) and counted by cause
  in ``counters()``. From then on the session is *degraded*: the server's state
  no longer matches the engine's cache, so every later step is local too,
  until a *recovery*: with ``live_keys``, a degraded (or offline) session
  re-creates its server session and re-sends the live entries (see Session).
- Inputs the client can check (sizes, duplicate slot ids, entropy) are rejected
  before anything is sent, with C++'s messages (they name the field).
- Demote tier (``tier_capacity`` > 0; session.h's "Demote tier", exactly): a
  step's outcome names ``evicted``, ``demoted`` and ``promoted``, disjoint and
  in append order, and the engine applies them in that order. ``tier`` (a
  TierCallbacks) hands them over inside the call that returns the outcome
  (step, step_pipelined, collect, flush, DecodeBatch.step): evict, then
  demote, then promote, each only with a non-empty list; the outcome still
  carries all three (an engine that sets ``evict`` frees them there, not
  again); an exception a callback raises propagates from the step call, the
  client's record already updated (in DecodeBatch.step: after every
  session's record is settled and every other session's callbacks ran; the
  first exception is raised). A promoted entry returns to its own
  append position in live_slots(); tier_slots() lists the demoted ones.
  Fail-open: the first locally decided step hands every demoted entry back
  in its ``evicted`` (merged with the rule's evictions in append order) and
  the tier is empty from then on; a recovery re-sends live entries only.

Thread-safety: a Session is used by one thread at a time (the engine's decode
loop).
"""

from __future__ import annotations

import collections
import math
import random
import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, Deque, List, Optional, Tuple

import grpc

from ._stubs import pb2
from .config import SessionConfig, policy_needs_entropy, ranking_needs_queries
from .decode_stream import DecodeStream, seconds_left
from .errors import SERVER_SIDE, EntroKvError, code_of, failed_precondition, invalid
from .live_set import LiveSet, StreamingRule
from .session_recovery import SessionRecovery
from .sketch import Sketcher
from .vectors import (as_vector, convert, entropy_of_logits, pinned_list,
                      slot_list, to_float32)

if TYPE_CHECKING:  # client.py and batch.py import this module.
    from .batch import BatchStep, DecodeBatch
    from .shadow import ShadowRequest
    from .client import Client


@dataclass
class SessionCounters:
    """What a session (or, summed, a client) did; export with the engine's
    metrics. A non-zero fallback_steps means the sidecar is down or too slow."""

    steps: int = 0  # Steps answered, by the server or locally.
    server_steps: int = 0  # Answered by the server.
    fallback_steps: int = 0  # Decided locally: the sum of the three below.
    fallback_deadline: int = 0  # ... because its deadline passed.
    fallback_unavailable: int = 0  # ... because the stream broke / offline.
    fallback_degraded: int = 0  # ... because an earlier step fell back.
    rejected_steps: int = 0  # Steps the server or the client rejected.
    evicted_by_server: int = 0
    evicted_by_fallback: int = 0
    bytes_sent: int = 0  # Serialized request bytes.
    bytes_received: int = 0  # Serialized response bytes.
    offline_sessions: int = 0  # Sessions created offline.
    unconfirmed_closes: int = 0  # Closes completed locally.
    # Recovery: attempts to re-create a degraded session on the server, and
    # those that brought it back online.
    recovery_attempts: int = 0
    recoveries: int = 0

    def __iadd__(self, other: "SessionCounters") -> "SessionCounters":
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def copy(self) -> "SessionCounters":
        return SessionCounters(**{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass
class TierCallbacks:
    """A demote tier's moves, handed to the engine (see the module
    docstring); each optional, called with a non-empty list of slot ids in
    append order, in the order evict, demote, promote."""

    # Free these for good, from the device or the host tier (the outcome's
    # ``evicted``). None: the engine frees outcome.evicted after the call.
    evict: Optional[Callable[[List[int]], Any]] = None
    demote: Optional[Callable[[List[int]], Any]] = None  # Device to host.
    promote: Optional[Callable[[List[int]], Any]] = None  # Host to device.


@dataclass
class StepOutcome:
    """One step's answer. Free the slots in ``evicted`` (append order); with
    a demote tier, move ``demoted`` to the host tier and ``promoted`` back,
    in that order."""

    step: int
    evicted: List[int] = field(default_factory=list)
    demoted: List[int] = field(default_factory=list)
    promoted: List[int] = field(default_factory=list)
    live: int = 0  # Live (device) entries after the step's moves.
    budget: int = 0  # The step's effective budget B_t.
    entropy: float = 0.0  # The entropy used (0 when none was needed).
    fallback: bool = False  # Decided locally, not by the server.
    deferred: bool = False  # Recorded, no decision (decide_every > 1).
    latency: float = 0.0  # Seconds from send to result (client side).
    server_compute: float = 0.0  # Seconds in the server's core (0 if local).


@dataclass
class _Pending:
    step: int
    slot_ids: List[int]
    sent: float
    entropy: float
    local: bool
    resync: bool = False  # Also re-sent the live entries after a recovery.
    # Decided locally already (a recovery settles the steps in flight).
    decided: Optional[StepOutcome] = None
    # A DecodeBatch session's step gathered into one of the batch's
    # messages (batch._Message), and its index among the message's steps.
    message: Any = None
    index: int = -1


class Session(SessionRecovery):
    """One sequence's connection to the sidecar. Made by Client.create_session
    or Client.attach; see the module docstring for the failure semantics.

    Recovery (as session.h's "Recovery", but for the health check). With
    ``live_keys``, a degraded session comes back online by itself; without it,
    it stays local for good. From ``recovery_interval`` after it degraded
    (+-``recovery_jitter``, a fraction), a step whose channel is not READY
    attempts nothing and does not wait (it pokes the channel, at most every
    0.1 s, with a background grpc.health.v1 call, its answer ignored: grpcio
    advances a connection only while a call is in flight). Unlike C++, no
    health check gates an attempt: a stopped or draining server whose channel
    stays READY costs an attempt of up to ``create_deadline`` and a doubled
    wait. Once READY, one attempt within ``create_deadline``: the steps in
    flight are decided locally, a NEW server session is created with the same
    configuration (``id`` changes) and attached to a new stream (a
    DecodeBatch's session: to the batch's stream, a new one when its last one
    ended), and ``live_keys(live_slots)`` gives the live entries' keys (full
    head_dim, any element type a step's keys take). The session is then online
    (``degraded`` False), the old server session is closed in the background,
    and the step goes to the server, re-sending the live entries (append order,
    pinned flags kept) before its own appends, under its own number; when the
    server accepts it, ``counters().recoveries`` + 1 and the wait is reset. The
    new server session's ranking state starts fresh. A failed attempt
    (``live_keys`` raises or returns the wrong size, the server errs or is
    silent) leaves the step to the local rule and doubles the wait, up to
    ``max_recovery_interval`` (``recovery_attempts`` counts attempts). A failed
    re-sending step degrades the session again and doubles the wait: late or
    its stream broken, it is decided locally; rejected, it raises the server's
    error as any rejected step (the new server session closed in the
    background). An attempt needs a step that carries what the new session's
    first step needs (queries and entropy when it decides). ``live_keys`` runs
    on the session's thread, in a step.
    """

    def __init__(self, *, client: "Client", session_id: str,
                 config: SessionConfig, step_deadline: float,
                 create_deadline: float, first_step: int, steps_done: int,
                 offline_when_unavailable: bool, entropy_on_client: bool,
                 sketcher: Sketcher, stream: Optional[DecodeStream],
                 offline_reason: Optional[EntroKvError] = None,
                 requested: Optional[SessionConfig] = None,
                 live_keys: Optional[Callable[[List[int]], Any]] = None,
                 recovery_interval: float = 0.5,
                 max_recovery_interval: float = 5.0,
                 recovery_jitter: float = 0.2,
                 shadowing: Optional["ShadowRequest"] = None,
                 tier: Optional[TierCallbacks] = None) -> None:
        self._client = client
        self._id = session_id
        self._config = config
        self._step_deadline = step_deadline
        self._create_deadline = create_deadline
        self._first_step = first_step
        self._next_step = first_step
        self._steps_done = steps_done
        self._offline_when_unavailable = offline_when_unavailable
        self._entropy_on_client = entropy_on_client
        self._sketcher = sketcher
        self._stream = stream
        self._live = LiveSet()
        self._tier = tier if tier is not None else TierCallbacks()
        self._in_flight: Deque[_Pending] = collections.deque()
        self._counters = SessionCounters()
        client._register(self._counters)
        self._closed = False
        self._batch: Optional["DecodeBatch"] = None  # Steps only through it.
        self._offline = offline_reason is not None
        self._degraded = self._offline
        self._degraded_reason: Optional[EntroKvError] = offline_reason
        if self._offline:
            self._counters.offline_sessions = 1
            client._state_log.offline(offline_reason, live_keys is not None)
        # Recovery (see the class docstring).
        self._requested = requested if requested is not None else config
        self._shadowing = shadowing
        self._live_keys = live_keys
        self._recovery_interval = recovery_interval
        self._max_recovery_interval = max_recovery_interval
        self._recovery_jitter = min(max(float(recovery_jitter), 0.0), 1.0)
        self._recovery_wait = recovery_interval
        self._random = random.Random()
        self._next_recovery = math.inf
        self._next_poke = 0.0
        # After a recovery, the next sent step re-sends (ids, flags, keys).
        self._resync: Optional[Tuple[List[int], List[bool], bytes]] = None
        self._batch_generation = 0  # The batch stream it is attached to.
        if self._offline:
            self._next_recovery = time.monotonic() + self._jittered(
                self._recovery_wait)
        self._rule = StreamingRule(
            budget=max(config.budget, 1),
            sinks=max(config.protection.sinks, config.streaming_sinks),
            recent=config.protection.recent,
            block_size=max(config.block_size, 1))

    # -- Properties -------------------------------------------------------------

    @property
    def id(self) -> str:
        """The server's session id; "" for an offline session. A recovery
        replaces it with the new server session's."""
        return self._id

    @property
    def config(self) -> SessionConfig:
        """The effective configuration (defaults filled in by the server)."""
        return self._config

    @property
    def next_step(self) -> int:
        """The number the next step will carry."""
        return self._next_step

    @property
    def offline(self) -> bool:
        """True when the session was created without the server (and has not
        recovered since)."""
        return self._offline

    @property
    def degraded(self) -> bool:
        """True once steps are decided locally (degraded_reason says why)."""
        return self._degraded

    @property
    def degraded_reason(self) -> Optional[EntroKvError]:
        return self._degraded_reason

    @property
    def in_flight(self) -> int:
        """Steps sent and not yet collected (0, 1 or 2)."""
        return len(self._in_flight)

    def counters(self) -> SessionCounters:
        return self._counters.copy()

    def tier_slots(self) -> List[int]:
        """Demote tier: the demoted entries as this client knows them, in
        append order (empty without a tier, and after a fail-open)."""
        return self._live.tier_slots()

    def live_slots(self) -> List[int]:
        """Live entries as this client knows them, in append order."""
        return self._live.slots()

    def next_step_decides(self, appended: int = 1) -> bool:
        """True when the next step, appending `appended` entries, may be a
        decision step: it must then carry queries (and the entropy when the
        policy reads it). False: queries and entropy may be left out and
        neither is sent."""
        every = self._config.decide_every
        if every <= 1:
            return True
        accepted = self._steps_done + (self._next_step - self._first_step)
        if (accepted + 1) % every == 0:
            return True
        ceiling = self._config.hard_ceiling
        return ceiling > 0 and len(self._live) + appended > ceiling

    # -- Steps --------------------------------------------------------------------

    def step(self, slot_ids: Any, keys: Any, queries: Any = None,
             entropy: Optional[float] = None, logits: Any = None,
             pinned: Any = None) -> StepOutcome:
        """Sends one step and waits for its evictions (or decides locally when
        the deadline passes).

        slot_ids: the engine's ids of the entries appended since the previous
            step (ints, unique among live entries). keys: their keys,
            [entry][layer][kv_head][head_dim], full head_dim, f32/f16/bf16.
        queries: [layer][q_head][head_dim]; may be None when
            next_step_decides() is False. entropy: H(p_t) in nats, or logits
            (computed on the client unless entropy_on_client=False).
        pinned: None or one flag per slot id (never evicted).
        Raises EntroKvError: INVALID_ARGUMENT for input the client rejects,
        the server's status for a step it rejects.
        """
        if self._in_flight:
            raise failed_precondition(
                "entrokv: Step() with steps in flight; Flush() first")
        self.step_async(slot_ids, keys, queries, entropy, logits, pinned)
        return self.collect()

    def step_pipelined(self, slot_ids: Any, keys: Any, queries: Any = None,
                       entropy: Optional[float] = None, logits: Any = None,
                       pinned: Any = None) -> Optional[StepOutcome]:
        """Sends step t and returns step t-1's outcome (None on the first
        call): the round trip overlaps the engine's compute, evictions apply
        one step late. Finish with flush()."""
        if len(self._in_flight) > 1:
            raise failed_precondition(
                "entrokv: StepPipelined() with two steps in flight")
        self.step_async(slot_ids, keys, queries, entropy, logits, pinned)
        if len(self._in_flight) < 2:
            return None
        return self.collect()

    def step_async(self, slot_ids: Any, keys: Any, queries: Any = None,
                   entropy: Optional[float] = None, logits: Any = None,
                   pinned: Any = None) -> None:
        """Sends a step without waiting (at most two in flight)."""
        if self._closed:
            raise failed_precondition("entrokv: the session is closed")
        if len(self._in_flight) >= 2:
            raise failed_precondition(
                "entrokv: two steps in flight already; Collect() first")
        if self._batch is not None:
            # Gathered with the batch's other sessions' steps (DecodeBatch).
            self._batch._gather(self, slot_ids, keys, queries, entropy, logits,
                                pinned)
            return
        if self._degraded:
            self._maybe_recover(slot_ids, keys, queries, entropy, logits, pinned)
        request = None if self._degraded else pb2.DecodeRequest()
        self._prepare(slot_ids, keys, queries, entropy, logits, pinned,
                      None if request is None else request.steps.add())
        if request is not None:
            self._counters.bytes_sent += request.ByteSize()
            self._stream.send(request)

    def collect(self) -> StepOutcome:
        """Waits for the oldest step in flight (deadline counted from its send)."""
        return self._deliver(self._collect())

    def _deliver(self, outcome: StepOutcome) -> StepOutcome:
        """Hands a step's moves to the tier callbacks as the outcome is
        returned to the engine (a session with a tier only)."""
        if self._config.tier_capacity > 0:
            t = self._tier
            for callback, ids in ((t.evict, outcome.evicted),
                                  (t.demote, outcome.demoted),
                                  (t.promote, outcome.promoted)):
                if callback is not None and ids:
                    callback(list(ids))
        return outcome

    def _collect(self) -> StepOutcome:
        if not self._in_flight:
            raise failed_precondition("entrokv: no step in flight")
        pending = self._in_flight.popleft()
        if pending.decided is not None:
            return pending.decided
        if pending.local:
            return self._fallback_local(pending)
        if self._degraded:  # A step whose message failed counts its own cause.
            failed = (pending.message.answer or (None, None))[1] if pending.message else None
            if failed is not None:
                return self._settle_answer(pending, None, failed, pending.index)
            return self._fallback(pending, "degraded")
        if pending.message is not None:
            response, error = self._batch._answer(pending.message)
            return self._settle_answer(pending, response, error, pending.index)
        try:
            response = self._stream.next(pending.sent + self._step_deadline)
        except EntroKvError as e:
            return self._fail_over(pending, e)
        self._counters.bytes_received += response.ByteSize()
        if len(response.results) != 1:
            return self._fail_over(pending, EntroKvError.internal(
                f"entrokv: a step response with {len(response.results)} results"))
        return self._finish(pending, response.results[0])

    def flush(self) -> Optional[StepOutcome]:
        """Collects the step still in flight after a pipelined run (or None)."""
        if len(self._in_flight) > 1:
            raise failed_precondition(
                "entrokv: Flush() with two steps in flight; Collect() first")
        if not self._in_flight:
            return None
        return self.collect()

    def close(self) -> None:
        """Ends the stream and closes the server session, waiting at most
        create_deadline. With offline_when_unavailable (the default), a close
        the server does not confirm completes locally (counted in
        unconfirmed_closes) and NOT_FOUND is success; without it, both raise.
        Idempotent; later steps raise FAILED_PRECONDITION."""
        if self._closed:
            return
        self._closed = True
        self._in_flight.clear()
        if self._batch is not None:
            self._batch._forget(self)
        try:
            if self._id:
                try:
                    self._client._stub.CloseSession(
                        pb2.CloseSessionRequest(session_id=self._id),
                        timeout=seconds_left(time.monotonic() + self._create_deadline))
                except grpc.RpcError as e:
                    err = EntroKvError.from_rpc(e, "CloseSession: ")
                    if not self._offline_when_unavailable:
                        raise err from None
                    if err.code == grpc.StatusCode.NOT_FOUND:
                        pass
                    elif err.code in SERVER_SIDE:
                        self._counters.unconfirmed_closes += 1
                    else:
                        raise err from None
        finally:
            if self._stream is not None:
                self._stream.cancel()
                self._stream = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        stream = getattr(self, "_stream", None)
        if stream is not None:
            try:
                stream.cancel()
            except Exception:
                pass

    # -- Internals ----------------------------------------------------------------

    def _validate(self, slot_ids: List[int], pinned: List[bool], keys,
                  queries, entropy, logits) -> Tuple[bool, float, bool]:
        """(decides, entropy, has_entropy) of a valid step; raises
        INVALID_ARGUMENT naming the field otherwise."""
        n = len(slot_ids)
        shape = self._config.shape
        key_elements = shape.full_key_elements()
        query_elements = shape.full_query_elements()
        if keys.size != n * key_elements:
            raise invalid(f"append.keys: {keys.size} elements, expected {n} "
                          f"entries x {key_elements} (layers x kv_heads x head_dim)")
        decides = self.next_step_decides(n)
        needs_queries = decides and ranking_needs_queries(self._config.ranking)
        if queries.size != query_elements and (needs_queries or queries.size != 0):
            suffix = (" on a decision step"
                      if decides and self._config.decide_every > 1 else "")
            raise invalid(f"queries: {queries.size} elements, expected "
                          f"{query_elements} (layers x q_heads x head_dim){suffix}")
        self._live.check_append(slot_ids, pinned)
        if not decides:
            return False, 0.0, False
        has_logits = logits is not None and as_vector(logits, "logits")[0].size > 0
        if entropy is not None and has_logits:
            raise invalid("entropy: give the entropy or the logits, not both")
        if entropy is not None:
            h = float(entropy)
            if not math.isfinite(h):
                raise invalid("entropy: not finite")
            if h < 0.0:
                raise invalid(f"entropy: {'%.6g' % h} is negative")
            return True, h, True
        if has_logits:
            try:
                return True, entropy_of_logits(logits), True
            except EntroKvError as e:
                raise invalid(f"logits: {e.message}") from None
        if policy_needs_entropy(self._config):
            raise invalid(f"entropy: policy {self._config.policy} reads the "
                          "entropy; give it or the logits")
        return True, 0.0, False

    def _prepare(self, slot_ids, keys, queries, entropy, logits, pinned, out) -> None:
        try:
            ids = slot_list(slot_ids)
            flags = pinned_list(pinned)
            k, kkind = as_vector(keys, "append.keys")
            q, qkind = as_vector(queries, "queries")
            decides, h, has_entropy = self._validate(ids, flags, k, q, entropy, logits)
        except EntroKvError:
            self._counters.rejected_steps += 1
            raise
        step = self._next_step
        resync = out is not None and self._resync is not None
        if out is not None:
            out.session_id = self._id
            out.step = step
            # After a recovery: the live entries first, in append order.
            r_ids, r_flags, r_keys = self._resync if resync else ([], [], b"")
            out.append.slot_ids.extend(r_ids)
            out.append.slot_ids.extend(ids)
            if flags or any(r_flags):
                out.append.pinned.extend(r_flags)
                out.append.pinned.extend(flags if flags else [False] * len(ids))
            wire = self._config.shape.element_type
            if self._sketcher.identity:
                out.append.keys = r_keys + convert(k, kkind, wire).tobytes()
                if decides and q.size > 0:
                    out.queries = convert(q, qkind, wire).tobytes()
            else:
                sk = self._sketcher.keys(to_float32(k, kkind), len(ids))
                out.append.keys = r_keys + convert(sk, "f32", wire).tobytes()
                if decides and q.size > 0:
                    sq = self._sketcher.queries(to_float32(q, qkind))
                    out.queries = convert(sq, "f32", wire).tobytes()
            if not decides:
                pass  # A step that decides nothing carries no queries, no entropy.
            elif logits is not None and has_entropy and entropy is None \
                    and not self._entropy_on_client:
                lv, lkind = as_vector(logits, "logits")
                out.logits.values.extend(to_float32(lv, lkind).tolist())
            elif has_entropy:
                out.entropy = h
        self._live.append(ids, flags)
        self._in_flight.append(_Pending(step, ids, time.monotonic(), h,
                                        out is None, resync))
        if resync:
            self._resync = None
        self._next_step += 1

    def _prepare_batched(self, step: "BatchStep", steps_of) -> Optional[Any]:
        """A DecodeBatch.step entry: _prepare_for_batch once the session may
        step (not closed, nothing in flight)."""
        if self._closed:
            raise failed_precondition("entrokv: the session is closed")
        if self._in_flight:
            raise failed_precondition(
                "entrokv: a step of this session is already in flight")
        return self._prepare_for_batch(step.slot_ids, step.keys, step.queries,
                                       step.entropy, step.logits, step.pinned,
                                       steps_of)

    def _prepare_for_batch(self, slot_ids, keys, queries, entropy, logits,
                           pinned, steps_of) -> Optional[Any]:
        """Validates and records a step of a DecodeBatch session. A session
        whose batch stream ended under another session's step degrades (its
        server state may be ahead of the engine's); a degraded one tries to
        recover. Unless it then decides locally, the step fills a new entry
        of steps_of() (the repeated steps of the message it joins, asked for
        after the recovery). Returns that entry, or None when local. Raises
        on the step's own error, with its entry removed again."""
        batch = self._batch
        if not self._degraded and self._batch_generation != batch._generation:
            self._degrade(EntroKvError(grpc.StatusCode.UNAVAILABLE,
                                       "entrokv: the DecodeBatch's stream ended"))
        if self._degraded:
            self._maybe_recover(slot_ids, keys, queries, entropy, logits, pinned)
        if self._degraded:
            self._prepare(slot_ids, keys, queries, entropy, logits, pinned, None)
            return None
        steps = steps_of()
        wire = steps.add()
        try:
            self._prepare(slot_ids, keys, queries, entropy, logits, pinned, wire)
        except BaseException:
            del steps[-1]
            raise
        self._counters.bytes_sent += wire.ByteSize()
        return wire

    def _settle_batched(self, response, error: Optional[EntroKvError],
                        index: int) -> StepOutcome:
        return self._settle_answer(self._in_flight.popleft(), response, error,
                                   index)

    def _settle_answer(self, pending: _Pending, response,
                       error: Optional[EntroKvError], index: int) -> StepOutcome:
        """A batch message's answer (or its error) for this session's step
        at `index` among the message's steps."""
        if pending.decided is not None:
            return pending.decided
        if pending.local:
            return self._fallback_local(pending)
        if error is not None:
            return self._fail_over(pending, error)
        if (index < 0 or index >= len(response.results)
                or response.results[index].session_id != self._id):
            return self._fail_over(pending, EntroKvError.internal(
                "entrokv: a batch response without this session's result"))
        result = response.results[index]
        self._counters.bytes_received += result.ByteSize()
        return self._finish(pending, result)

    def _degrade(self, why: EntroKvError) -> None:
        if self._degraded:
            return
        self._degraded = True
        self._degraded_reason = why
        self._client._state_log.degraded(why, self._live_keys is not None)
        # The server's state no longer matches the engine's cache: end the
        # stream; the server keeps the session until its idle timeout,
        # close(), or a recovery (which closes it).
        if self._stream is not None:
            self._stream.cancel()
        self._next_recovery = time.monotonic() + self._jittered(self._recovery_wait)

    def _fail_over(self, pending: _Pending, why: EntroKvError) -> StepOutcome:
        """The step sent but not answered: degrade and decide it locally,
        counted as a deadline or as the stream's failure."""
        if pending.resync:  # A recovery whose first step fails: on any path.
            self._recovery_wait = min(self._recovery_wait * 2,
                                      self._max_recovery_interval)
        self._degrade(why)
        return self._fallback(pending, "deadline"
                              if why.code == grpc.StatusCode.DEADLINE_EXCEEDED
                              else "unavailable")

    def _fallback_local(self, pending: _Pending) -> StepOutcome:
        """A step never sent (offline or degraded when it was prepared)."""
        return self._fallback(pending, "unavailable" if self._offline else "degraded")

    def _fallback(self, pending: _Pending, cause: str) -> StepOutcome:
        # With a demote tier, every demoted entry too: no one scores them
        # any more. Without one, the streaming evictions.
        evicted = self._live.fail_open_evictions(self._rule)
        self._live.remove(evicted)
        c = self._counters
        c.steps += 1
        c.fallback_steps += 1
        setattr(c, "fallback_" + cause, getattr(c, "fallback_" + cause) + 1)
        c.evicted_by_fallback += len(evicted)
        return StepOutcome(step=pending.step, evicted=evicted, live=len(self._live),
                           budget=self._rule.budget, entropy=pending.entropy,
                           fallback=True,
                           latency=time.monotonic() - pending.sent)

    def _finish(self, pending: _Pending, result) -> StepOutcome:
        if result.HasField("status") and result.status.code != 0:
            # The server left the session unchanged: forget the step's
            # entries and let the next step take its number again.
            self._live.remove(pending.slot_ids)
            self._next_step = min(self._next_step, pending.step)
            self._counters.rejected_steps += 1
            error = EntroKvError(code_of(result.status.code), result.status.message)
            if pending.resync:
                # The new server session holds none of the live entries:
                # give it up and go on locally; a later attempt re-creates one.
                self._client._close_in_background(self._id)
                self._recovery_wait = min(self._recovery_wait * 2,
                                          self._max_recovery_interval)
                self._degrade(error)
            raise error
        if pending.resync:
            self._counters.recoveries += 1
            self._recovery_wait = self._recovery_interval
            self._client._state_log.recovered()
        evicted = list(result.evicted)
        demoted = list(result.demoted)
        promoted = list(result.promoted)
        # In the order an engine applies them.
        self._live.remove(evicted)
        self._live.demote(demoted)
        self._live.promote(promoted)
        c = self._counters
        c.steps += 1
        c.server_steps += 1
        c.evicted_by_server += len(evicted)
        return StepOutcome(step=pending.step, evicted=evicted, demoted=demoted,
                           promoted=promoted, live=result.live,
                           budget=result.budget, entropy=result.entropy,
                           deferred=result.deferred,
                           latency=time.monotonic() - pending.sent,
                           server_compute=result.compute_ns / 1e9)


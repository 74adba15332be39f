"""Client and Session: an inference engine's handle on an entrokv sidecar.

The Python counterpart of client/include/entrokv/client/{client.h,session.h},
with the same guarantees:

- Step numbers are assigned by the Session (first_step, then +1 per accepted
  step); a step the server rejects leaves the session unchanged and its number
  is reused by the next step.
- Every step has a deadline (``step_deadline``, counted from its send). When it
  passes, the stream breaks, or the session is offline, the step is decided
  locally with the ``streaming`` rule (sinks, pinned and most recent entries
  kept, the oldest of the rest evicted down to the budget) and counted by cause
  in ``counters()``. From then on the session is *degraded*: the server's state
  no longer matches the engine's cache, so every later step is local too,
  until a *recovery*: with a ``live_keys`` callback, a degraded (or offline)
  session re-creates its server session once the channel is connected again
  and re-sends the live entries' keys (see Session).
- ``create_session`` waits at most ``create_deadline`` for the RPC and the
  stream's attach together. A failure that is not the caller's (unreachable or
  silent server, a server limit, a broken server) gives an *offline* session
  (``session.offline``, ``session.degraded_reason``) unless
  ``offline_when_unavailable=False``; the caller's own errors are raised.
- Inputs the client can check (sizes, duplicate slot ids, entropy) are rejected
  before anything is sent, with C++'s messages (they name the field).

Deadlines are in seconds (float; ``math.inf``: wait forever). Defaults come
from ``ENTROKV_TARGET`` and ``ENTROKV_STEP_DEADLINE_MS`` when set; a malformed
``ENTROKV_STEP_DEADLINE_MS`` fails ``Client()`` (INVALID_ARGUMENT), as C++'s
``Client::Connect``. TLS, mutual TLS and a bearer token are Client options
named as C++'s ClientOptions.

Thread-safety: a Client may be shared by threads; a Session is used by one
thread at a time (the engine's decode loop).
"""

from __future__ import annotations

import collections
import functools
import math
import os
import queue
import random
import threading
import time
from dataclasses import dataclass, field, fields
from typing import (TYPE_CHECKING, Any, Callable, Deque, List, Optional,
                    Sequence, Tuple, Union)

import grpc
import numpy as np

from . import config as _config
from ._stubs import pb2, pb2_grpc
from .config import SessionConfig, policy_needs_entropy, validate_config
from .errors import (SERVER_SIDE, EntroKvError, code_of, failed_precondition,
                     invalid)
from .live_set import LiveSet, StreamingRule
from .sketch import Sketcher
from .state_log import StateLog
from .vectors import as_vector, convert, entropy_of_logits, to_float32

if TYPE_CHECKING:  # batch.py imports this module.
    from .batch import BatchStep, DecodeBatch

DEFAULT_TARGET = "unix:/run/entrokv/entrokv.sock"
DEFAULT_STEP_DEADLINE = 0.1  # seconds
DEFAULT_CREATE_DEADLINE = 0.2  # seconds
_U64_MAX = (1 << 64) - 1


def _env_target() -> str:
    return os.environ.get("ENTROKV_TARGET") or DEFAULT_TARGET


def _env_step_deadline() -> Optional[float]:
    """ENTROKV_STEP_DEADLINE_MS in seconds; None when unset or empty. Raises
    INVALID_ARGUMENT for a value that is not a positive number of
    milliseconds (fractions allowed), as client/src/environment.cc."""
    raw = os.environ.get("ENTROKV_STEP_DEADLINE_MS")
    if not raw:
        return None
    try:
        ms = float(raw) if "_" not in raw else math.nan
    except ValueError:
        ms = math.nan
    if not ms > 0 or ms > 1e12:
        raise invalid(f'ENTROKV_STEP_DEADLINE_MS: "{raw}" is not a positive '
                      "number of milliseconds")
    return ms / 1000.0


def _read_pem(what: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        code = (grpc.StatusCode.PERMISSION_DENIED if isinstance(e, PermissionError)
                else grpc.StatusCode.NOT_FOUND)
        raise EntroKvError(code, f'{what}: cannot read "{path}"') from None


def _channel_credentials(root_certs_file: str, cert_file: str,
                         key_file: str) -> Optional[grpc.ChannelCredentials]:
    """None (plaintext), or TLS credentials (mutual with a client
    certificate), as client/src/client.cc ChannelCredentials."""
    if bool(cert_file) != bool(key_file):
        raise invalid("tls_cert_file and tls_key_file: give both or neither")
    if not root_certs_file:
        if cert_file:
            raise invalid("tls_cert_file: needs tls_root_certs_file (TLS)")
        return None
    roots = _read_pem("tls_root_certs_file", root_certs_file)
    cert = key = None
    if cert_file:
        cert = _read_pem("tls_cert_file", cert_file)
        key = _read_pem("tls_key_file", key_file)
    return grpc.ssl_channel_credentials(root_certificates=roots,
                                        private_key=key, certificate_chain=cert)


class _CallDetails(collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials",
                         "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


class _BearerToken(grpc.UnaryUnaryClientInterceptor,
                   grpc.StreamStreamClientInterceptor):
    """Adds "authorization: Bearer <token>" to every call, unary and
    streaming alike. (gRPC's call credentials would send it only over TLS;
    the token also guards plaintext unix sockets and loopback.)"""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", "Bearer " + token)

    def _details(self, d) -> _CallDetails:
        metadata = list(d.metadata or []) + [self._header]
        return _CallDetails(d.method, d.timeout, metadata, d.credentials,
                            getattr(d, "wait_for_ready", None),
                            getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_stream(self, continuation, client_call_details,
                                request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


# grpc_connectivity_state values, as the channel reports them.
_IDLE, _CONNECTING, _READY, _TRANSIENT_FAILURE, _SHUTDOWN = range(5)
# How often a degraded session may poke a channel that is not READY (gRPC's
# shortest reconnect backoff).
_POKE_EVERY = 0.1
_POKE_TIMEOUT = 1.0


def _timeout(deadline: float) -> Optional[float]:
    """Seconds left until a time.monotonic() deadline (None: forever)."""
    if math.isinf(deadline):
        return None
    return max(0.0, deadline - time.monotonic())


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
class StepOutcome:
    """One step's answer. Free the slots in ``evicted`` (append order)."""

    step: int
    evicted: List[int] = field(default_factory=list)
    live: int = 0  # Live entries after the evictions.
    budget: int = 0  # The step's effective budget B_t.
    entropy: float = 0.0  # The entropy used (0 when none was needed).
    fallback: bool = False  # Decided locally, not by the server.
    deferred: bool = False  # Recorded, no decision (decide_every > 1).
    latency: float = 0.0  # Seconds from send to result (client side).
    server_compute: float = 0.0  # Seconds in the server's core (0 if local).


@dataclass
class SessionStats:
    live: int = 0
    peak_live: int = 0
    budget: int = 0
    steps: int = 0
    last_step: Optional[int] = None
    appended: int = 0
    evicted: int = 0
    bytes_held: int = 0
    placement: str = "cpu"


@dataclass
class SessionInfo:
    """A session as the server describes it."""

    id: str
    config: SessionConfig
    stats: SessionStats
    attached: bool
    idle: float  # Seconds since it was last detached (0 while attached).


@dataclass
class ServerInfo:
    sessions: int = 0
    max_sessions: int = 0  # 0: unlimited (likewise below).
    bytes_held: int = 0
    max_bytes: int = 0
    gpu_bytes_held: int = 0
    max_gpu_bytes: int = 0
    max_live_entries: int = 0
    gpu_available: bool = False


def _info_from_proto(m) -> SessionInfo:
    s = m.stats
    return SessionInfo(
        id=m.session_id,
        config=_config.from_proto(m.config),
        stats=SessionStats(
            live=s.live, peak_live=s.peak_live, budget=s.budget, steps=s.steps,
            last_step=s.last_step if s.HasField("last_step") else None,
            appended=s.appended, evicted=s.evicted, bytes_held=s.bytes_held,
            placement=_config._enum(s.placement, _config.PLACEMENTS, "cpu")),
        attached=m.attached, idle=m.idle_ms / 1000.0)


def _host_array(x: Any) -> np.ndarray:
    """A numpy view of an engine's list, array or (torch) tensor."""
    if hasattr(x, "detach"):  # A torch tensor.
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _slot_list(slot_ids: Any) -> List[int]:
    if slot_ids is None:
        return []
    a = _host_array(slot_ids)
    if a.size == 0:
        return []
    if a.dtype.kind not in "ui":
        raise invalid(f"append.slot_ids: unsupported dtype {a.dtype} (want integers)")
    ids = [int(x) for x in a.reshape(-1).tolist()]
    for sid in ids:
        if sid < 0 or sid > _U64_MAX:
            raise invalid(f"append.slot_ids: slot {sid} is outside [0, 2^64)")
    return ids


def _pinned_list(pinned: Any) -> List[bool]:
    if pinned is None:
        return []
    return [bool(x) for x in _host_array(pinned).reshape(-1).tolist()]


# --- The Decode stream ---------------------------------------------------------

_END = object()


class _Stream:
    """One Decode stream: requests through a queue, responses read by a
    thread into a queue, so that a wait can have a deadline."""

    def __init__(self, stub) -> None:
        self._requests: "queue.Queue[Any]" = queue.Queue()
        self._responses: "queue.Queue[Any]" = queue.Queue()
        self._call = stub.Decode(iter(self._requests.get, _END))
        self._ended: Optional[EntroKvError] = None
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name="entrokv-decode-reader")
        self._reader.start()

    def _read(self) -> None:
        try:
            for response in self._call:
                self._responses.put(response)
            self._responses.put(EntroKvError(grpc.StatusCode.UNAVAILABLE,
                                             "entrokv: the Decode stream ended"))
        except grpc.RpcError as e:
            self._responses.put(EntroKvError.from_rpc(e, "Decode: "))
        except Exception as e:  # pragma: no cover - defensive
            self._responses.put(EntroKvError.internal(f"Decode: {e}"))

    def send(self, request) -> None:
        self._requests.put(request)

    def next(self, deadline: float):
        """The next response, or raise EntroKvError (DEADLINE_EXCEEDED when
        `deadline` passes; the stream's status when it ended)."""
        if self._ended is not None:
            raise self._ended
        try:
            item = self._responses.get(timeout=_timeout(deadline))
        except queue.Empty:
            raise EntroKvError(grpc.StatusCode.DEADLINE_EXCEEDED,
                               "entrokv: step deadline exceeded") from None
        if isinstance(item, EntroKvError):
            self._ended = item
            raise item
        return item

    def cancel(self) -> None:
        self._requests.put(_END)
        self._call.cancel()


# --- Session -------------------------------------------------------------------


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


class Session:
    """One sequence's connection to the sidecar. Made by Client.create_session
    or Client.attach; see the module docstring for the failure semantics.

    Recovery (as session.h's "Recovery"). The engine owns its KV cache, so
    only it can give the server back the keys of the live entries: with
    ``live_keys`` set, a degraded session comes back online by itself;
    without it, it stays local for the rest of its life. From
    ``recovery_interval`` after it degraded (+-``recovery_jitter``, a
    fraction), each step first looks at the channel: while it is not
    connected nothing is attempted and the step does not wait (a channel that
    is not READY is poked with a background grpc.health.v1 call, because
    gRPC reconnects it only when a call asks, and grpcio makes progress on a
    connection only while a call is in flight). Once it is connected, one attempt,
    bounded by ``create_deadline`` as a whole: the steps in flight are
    decided locally, a NEW server session is created with the same
    configuration (``id`` changes) and attached to a new stream (a session of
    a DecodeBatch: to the batch's stream, a new one when its last one ended),
    and ``live_keys(live_slots)`` gives the live entries' keys
    ([entry][layer][kv_head][head_dim], full head_dim, any element type the
    step's keys accept). The step then goes to the server, re-sending the
    live entries (append order, pinned flags kept) before its own appends,
    under its own number. When the server answers it, the session is online
    (``degraded`` False, ``counters().recoveries`` + 1) and the old server
    session is closed in the background. The new server session starts with
    fresh ranking state. A failed attempt (``live_keys`` raises or returns
    the wrong size, the server errs or is silent, the re-sending step is
    rejected or late) leaves the step to the local rule and doubles the wait,
    up to ``max_recovery_interval`` (``counters().recovery_attempts`` counts
    attempts). An attempt is made only when the step carries what the new
    session's first step needs (queries and entropy when it decides).
    ``live_keys`` is called on the session's thread, inside a step call.
    """

    def __init__(self, *, client: "Client", session_id: str,
                 config: SessionConfig, step_deadline: float,
                 create_deadline: float, first_step: int, steps_done: int,
                 offline_when_unavailable: bool, entropy_on_client: bool,
                 sketcher: Sketcher, stream: Optional[_Stream],
                 offline_reason: Optional[EntroKvError] = None,
                 requested: Optional[SessionConfig] = None,
                 live_keys: Optional[Callable[[List[int]], Any]] = None,
                 recovery_interval: float = 0.5,
                 max_recovery_interval: float = 5.0,
                 recovery_jitter: float = 0.2) -> None:
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
        self._live_keys = live_keys
        self._recovery_interval = recovery_interval
        self._max_recovery_interval = max_recovery_interval
        self._recovery_jitter = min(max(float(recovery_jitter), 0.0), 1.0)
        self._recovery_wait = recovery_interval
        self._random = random.Random()
        self._next_recovery = math.inf
        self._next_poke = 0.0
        # The live entries the next sent step re-sends first after a
        # recovery: (slot ids, pinned flags, keys in wire form).
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
        if self._batch is not None:
            raise failed_precondition(
                "entrokv: this session belongs to a DecodeBatch; step it with "
                "DecodeBatch.step")
        if len(self._in_flight) >= 2:
            raise failed_precondition(
                "entrokv: two steps in flight already; Collect() first")
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
        if not self._in_flight:
            raise failed_precondition("entrokv: no step in flight")
        pending = self._in_flight.popleft()
        if pending.decided is not None:
            return pending.decided
        if pending.local:
            return self._fallback_local(pending)
        if self._degraded:
            return self._fallback(pending, "degraded")
        try:
            response = self._stream.next(pending.sent + self._step_deadline)
        except EntroKvError as e:
            if pending.resync:  # A recovery whose first step fails.
                self._recovery_wait = min(self._recovery_wait * 2,
                                          self._max_recovery_interval)
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
        create_deadline. A close the server does not confirm completes
        locally (counted in unconfirmed_closes); NOT_FOUND is success.
        Idempotent; later steps raise FAILED_PRECONDITION."""
        if self._closed:
            return
        self._closed = True
        self._in_flight.clear()
        try:
            if self._id:
                try:
                    self._client._stub.CloseSession(
                        pb2.CloseSessionRequest(session_id=self._id),
                        timeout=_timeout(time.monotonic() + self._create_deadline))
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
        if queries.size != query_elements and (decides or queries.size != 0):
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
            ids = _slot_list(slot_ids)
            flags = _pinned_list(pinned)
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
                if decides:
                    out.queries = convert(q, qkind, wire).tobytes()
            else:
                sk = self._sketcher.keys(to_float32(k, kkind), len(ids))
                out.append.keys = r_keys + convert(sk, "f32", wire).tobytes()
                if decides:
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

    def _prepare_batched(self, step: "BatchStep", out) -> bool:
        """Validates and records a batch entry; fills `out` unless degraded.
        Returns whether it was sent. Raises on the entry's own error."""
        if self._closed:
            raise failed_precondition("entrokv: the session is closed")
        if self._in_flight:
            raise failed_precondition(
                "entrokv: a step of this session is already in flight")
        batch = self._batch
        if not self._degraded and self._batch_generation != batch._generation:
            # The batch's stream ended under another session's step: this
            # session's server state may be ahead of the engine's.
            self._degrade(EntroKvError(grpc.StatusCode.UNAVAILABLE,
                                       "entrokv: the DecodeBatch's stream ended"))
        if self._degraded:
            self._maybe_recover(step.slot_ids, step.keys, step.queries,
                                step.entropy, step.logits, step.pinned)
        send = not self._degraded
        self._prepare(step.slot_ids, step.keys, step.queries, step.entropy,
                      step.logits, step.pinned, out if send else None)
        if send:
            self._counters.bytes_sent += out.ByteSize()
        return send

    def _collect_batched(self, response, error: Optional[EntroKvError],
                         index: int) -> StepOutcome:
        pending = self._in_flight.popleft()
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

    # -- Recovery -------------------------------------------------------------------

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
            ids = _slot_list(slot_ids)
            flags = _pinned_list(pinned)
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
        if q.size != c.shape.full_query_elements():
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
        # channel that is not READY is poked (see Client._poke): grpcio has
        # no background poller, so without a call in flight a connection
        # attempt makes no progress until gRPC's 5 s backup poll.
        state = self._client._channel_state(try_to_connect=True)
        if state != _READY and now >= self._next_poke:
            self._client._poke()
            self._next_poke = now + _POKE_EVERY
        if state != _READY:
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
        new_id, effective = client._create_server_session(self._requested,
                                                          deadline)
        batch = self._batch
        stream: Optional[_Stream] = None
        try:
            if batch is not None:
                via = batch._live_stream()
            else:
                stream = _Stream(client._stub)
                via = stream
            try:
                client._attach_on(via, new_id, deadline)
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

    def _fail_over(self, pending: _Pending, why: EntroKvError) -> StepOutcome:
        """The step sent but not answered: degrade and decide it locally,
        counted as a deadline or as the stream's failure."""
        self._degrade(why)
        return self._fallback(pending, "deadline"
                              if why.code == grpc.StatusCode.DEADLINE_EXCEEDED
                              else "unavailable")

    def _fallback_local(self, pending: _Pending) -> StepOutcome:
        """A step never sent (offline or degraded when it was prepared)."""
        return self._fallback(pending, "unavailable" if self._offline else "degraded")

    def _fallback(self, pending: _Pending, cause: str) -> StepOutcome:
        evicted = self._live.streaming_evictions(self._rule)
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
        self._live.remove(evicted)
        c = self._counters
        c.steps += 1
        c.server_steps += 1
        c.evicted_by_server += len(evicted)
        return StepOutcome(step=pending.step, evicted=evicted, live=result.live,
                           budget=result.budget, entropy=result.entropy,
                           deferred=result.deferred,
                           latency=time.monotonic() - pending.sent,
                           server_compute=result.compute_ns / 1e9)


# --- Client --------------------------------------------------------------------


class Client:
    """One gRPC channel to an entrokv server; creates and manages sessions.

    target: any gRPC target ("127.0.0.1:50051", "unix:/run/entrokv/entrokv.sock");
        default $ENTROKV_TARGET, else "unix:/run/entrokv/entrokv.sock".
    step_deadline: per-step deadline in seconds for the sessions it creates;
        default $ENTROKV_STEP_DEADLINE_MS / 1000, else 0.1.
    create_deadline: the most create_session (RPC + attach), attach and
        Session.close wait, in seconds (default 0.2).
    rpc_deadline: get_session, list_sessions and close_session (default 5).
    tls_root_certs_file: PEM CA certificates that verify the server; set, the
        channel uses TLS (the server's certificate must name the target's
        host). tls_cert_file + tls_key_file: a client certificate (mutual
        TLS); they need tls_root_certs_file. Empty: plaintext.
    bearer_token: non-empty, every call (unary and Decode streams) carries
        the metadata "authorization: Bearer <token>" (the server's
        --auth_token_file), over TLS and plaintext alike.
    reconnect_initial_backoff, reconnect_max_backoff, connect_timeout: the
        channel's reconnection after the server went away (as C++: 0.1 s
        after a failed connect, 1.6 times longer each time up to 0.25 s,
        +-20 %; each attempt may take connect_timeout, 1 s).
    Logging: the logger "entrokv" gets a WARNING when a session loses the
        sidecar (degrades) or is created offline, saying whether it will
        recover (live_keys) or stay local, and an INFO when one is decided
        by the sidecar again; each kind at most once per state_log.EVERY
        (10 s) per Client, the next saying how many were held back.
    Constructing it does not contact the server. Raises INVALID_ARGUMENT for
    an empty target, a bad deadline or reconnect setting, a client
    certificate without its key (or without tls_root_certs_file), or a
    malformed $ENTROKV_STEP_DEADLINE_MS (even when step_deadline is given,
    as C++'s Connect); NOT_FOUND / PERMISSION_DENIED for a PEM file that
    cannot be read.
    """

    def __init__(self, target: Optional[str] = None, *,
                 step_deadline: Optional[float] = None,
                 create_deadline: Optional[float] = None,
                 rpc_deadline: float = 5.0,
                 max_message_bytes: int = 64 << 20,
                 reconnect_initial_backoff: float = 0.1,
                 reconnect_max_backoff: float = 0.25,
                 connect_timeout: float = 1.0,
                 tls_root_certs_file: str = "",
                 tls_cert_file: str = "",
                 tls_key_file: str = "",
                 bearer_token: str = "") -> None:
        self.target = target if target is not None else _env_target()
        if not self.target:
            raise invalid("target: empty")
        env_deadline = _env_step_deadline()  # Malformed: fails either way.
        if step_deadline is not None:
            self.step_deadline = step_deadline
        elif env_deadline is not None:
            self.step_deadline = env_deadline
        else:
            self.step_deadline = DEFAULT_STEP_DEADLINE
        self.create_deadline = (create_deadline if create_deadline is not None
                                else DEFAULT_CREATE_DEADLINE)
        for name, v in (("step_deadline", self.step_deadline),
                        ("create_deadline", self.create_deadline),
                        ("rpc_deadline", rpc_deadline)):
            if not v > 0:
                raise invalid(f"{name}: {v} is not positive")
        if not (reconnect_initial_backoff > 0 and reconnect_max_backoff > 0
                and connect_timeout > 0):
            raise invalid("reconnect: backoffs and connect_timeout must be positive")
        if reconnect_max_backoff < reconnect_initial_backoff:
            raise invalid("reconnect_max_backoff: below reconnect_initial_backoff")
        self.rpc_deadline = rpc_deadline
        credentials = _channel_credentials(tls_root_certs_file, tls_cert_file,
                                           tls_key_file)
        options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.initial_reconnect_backoff_ms", int(reconnect_initial_backoff * 1000)),
            ("grpc.max_reconnect_backoff_ms", int(reconnect_max_backoff * 1000)),
            ("grpc.min_reconnect_backoff_ms", int(connect_timeout * 1000)),
        ]
        if credentials is None:
            self._raw_channel = grpc.insecure_channel(self.target, options=options)
        else:
            self._raw_channel = grpc.secure_channel(self.target, credentials,
                                                    options=options)
        self._channel = self._raw_channel
        if bearer_token:
            self._channel = grpc.intercept_channel(
                self._raw_channel, _BearerToken(bearer_token))
        self._stub = pb2_grpc.EntroKvStub(self._channel)
        self._lock = threading.Lock()
        self._all_counters: List[SessionCounters] = []
        # Background calls (closes, pokes) held until they end: a dropped
        # grpc future is cancelled when it is garbage-collected.
        self._background: set = set()
        self._poking = None  # The health call of _poke, while in flight.
        self._state_log = StateLog()

    def _register(self, counters: SessionCounters) -> None:
        with self._lock:
            self._all_counters.append(counters)

    def counters(self) -> SessionCounters:
        """The sum of the counters of every session this client made."""
        total = SessionCounters()
        with self._lock:
            for c in self._all_counters:
                total += c
        return total

    def close(self) -> None:
        """Closes the channel (sessions' streams end with it)."""
        self._raw_channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- Sessions ---------------------------------------------------------------

    def create_session(self, config: Union[SessionConfig, str, None] = None, *,
                       session_id: str = "",
                       step_deadline: Optional[float] = None,
                       create_deadline: Optional[float] = None,
                       first_step: int = 0,
                       offline_when_unavailable: bool = True,
                       entropy_on_client: bool = True,
                       projection: Any = None,
                       live_keys: Optional[Callable[[List[int]], Any]] = None,
                       recovery_interval: float = 0.5,
                       max_recovery_interval: float = 5.0,
                       recovery_jitter: float = 0.2,
                       _batch: Optional["DecodeBatch"] = None,
                       **config_fields: Any) -> Session:
        """Creates a server session and attaches a Decode stream to it.

        config: a SessionConfig, a policy name ("window", "h2o+entropy",
            "entropy", ...) or None (every default); `config_fields` set
            SessionConfig fields on top (e.g. budget=64, shape=Shape(...)).
        projection: the engine's own sketch matrices (sketched sessions), one
            head_dim x r matrix per (sent layer, kv head), layer-major.
        live_keys: the engine's callback for recovery (see Session): given
            the live slot ids in append order, returns their keys
            [entry][layer][kv_head][head_dim] (full head_dim); raising aborts
            the attempt. None: a degraded session stays local for good.
        recovery_interval, max_recovery_interval (seconds), recovery_jitter
            (a fraction): the first attempt comes recovery_interval after the
            session degraded, each failed one doubles the wait up to
            max_recovery_interval; each wait varies by +-recovery_jitter.
        Raises EntroKvError for the caller's errors (INVALID_ARGUMENT naming a
        bad config field, ALREADY_EXISTS, FAILED_PRECONDITION, ...). Other
        failures give an offline session unless offline_when_unavailable=False.
        """
        if isinstance(config, str):
            cfg = SessionConfig.for_policy(config, **config_fields)
        elif config is None:
            cfg = SessionConfig(**config_fields)
        else:
            cfg = config.copy()
            for k, v in config_fields.items():
                setattr(cfg, k, v)
        validate_config(cfg)
        sketcher = Sketcher(cfg, projection)  # A bad projection is the caller's.
        step_deadline = self.step_deadline if step_deadline is None else step_deadline
        create_deadline = (self.create_deadline if create_deadline is None
                           else create_deadline)
        deadline = time.monotonic() + create_deadline
        new_session = functools.partial(
            Session, client=self, step_deadline=step_deadline,
            create_deadline=create_deadline, first_step=first_step, steps_done=0,
            offline_when_unavailable=offline_when_unavailable,
            entropy_on_client=entropy_on_client, sketcher=sketcher,
            requested=cfg, live_keys=live_keys,
            recovery_interval=recovery_interval,
            max_recovery_interval=max_recovery_interval,
            recovery_jitter=recovery_jitter)

        def offline(why: EntroKvError) -> Session:
            # The channel keeps reconnecting only while a call is in flight
            # (see _poke): without this, a client that only creates sessions
            # would find a restarted server after gRPC's 5 s backup poll.
            self._poke()
            if not offline_when_unavailable:
                raise why
            return new_session(session_id="", config=cfg, stream=None,
                               offline_reason=why)

        request = pb2.CreateSessionRequest(config=_config.to_proto(cfg, pb2),
                                           session_id=session_id)
        try:
            response = self._stub.CreateSession(request, timeout=_timeout(deadline))
        except grpc.RpcError as e:
            err = EntroKvError.from_rpc(e, "CreateSession: ")
            if err.code not in SERVER_SIDE:
                raise EntroKvError(err.code, e.details() or "") from None
            return offline(err)
        effective = (_config.from_proto(response.session.config, cfg)
                     if response.session.HasField("config") else cfg)
        stream = _Stream(self._stub) if _batch is None else _batch._live_stream()
        try:
            self._attach_on(stream, response.session_id, deadline)
        except EntroKvError as e:
            if _batch is None:
                stream.cancel()
            else:
                # A late answer to the attach must not be read as a step's.
                _batch._end_stream()
            self._close_in_background(response.session_id)
            return offline(EntroKvError(e.code, "attach: " + e.message))
        session = new_session(session_id=response.session_id, config=effective,
                              stream=stream if _batch is None else None)
        if _batch is not None:
            session._batch_generation = _batch._generation
        return session

    def create_batch(self) -> "DecodeBatch":
        """A batch of sessions that step together: one message (one round
        trip) per decode iteration, whatever the batch size. Opens its
        stream; does not wait for the server."""
        from .batch import DecodeBatch  # batch.py builds on this module.
        return DecodeBatch(self)

    def attach(self, session_id: str, *, live_slots: Sequence[int] = (),
               step_deadline: Optional[float] = None,
               create_deadline: Optional[float] = None,
               offline_when_unavailable: bool = True,
               entropy_on_client: bool = True,
               projection: Any = None,
               live_keys: Optional[Callable[[List[int]], Any]] = None,
               recovery_interval: float = 0.5,
               max_recovery_interval: float = 5.0,
               recovery_jitter: float = 0.2) -> Session:
        """Attaches to an existing session (e.g. after the engine's stream
        broke). The next step is the server's last step + 1; `live_slots` are
        the slots the engine still holds for it, in append order. Never fails
        open. Raises EntroKvError (NOT_FOUND, FAILED_PRECONDITION, ...)."""
        create_deadline = (self.create_deadline if create_deadline is None
                           else create_deadline)
        step_deadline = self.step_deadline if step_deadline is None else step_deadline
        deadline = time.monotonic() + create_deadline
        got = self._call(self._stub.GetSession,
                         pb2.GetSessionRequest(session_id=session_id),
                         _timeout(deadline))
        info = _info_from_proto(got.session)
        first = info.stats.last_step + 1 if info.stats.last_step is not None else 0
        sketcher = Sketcher(info.config, projection)
        stream = _Stream(self._stub)
        try:
            self._attach_on(stream, session_id, deadline)
        except EntroKvError:
            stream.cancel()
            raise
        session = Session(client=self, session_id=session_id, config=info.config,
                          step_deadline=step_deadline,
                          create_deadline=create_deadline, first_step=first,
                          steps_done=info.stats.steps,
                          offline_when_unavailable=offline_when_unavailable,
                          entropy_on_client=entropy_on_client, sketcher=sketcher,
                          stream=stream, live_keys=live_keys,
                          recovery_interval=recovery_interval,
                          max_recovery_interval=max_recovery_interval,
                          recovery_jitter=recovery_jitter)
        session._live.append(_slot_list(list(live_slots)), [])
        return session

    def get_session(self, session_id: str) -> SessionInfo:
        """The session as the server describes it. Raises NOT_FOUND."""
        r = self._call(self._stub.GetSession,
                       pb2.GetSessionRequest(session_id=session_id), self.rpc_deadline)
        return _info_from_proto(r.session)

    def list_sessions(self) -> Tuple[List[SessionInfo], ServerInfo]:
        """Every session (ordered by id) and the server's usage and limits."""
        r = self._call(self._stub.ListSessions, pb2.ListSessionsRequest(),
                       self.rpc_deadline)
        s = r.server
        server = ServerInfo(sessions=s.sessions, max_sessions=s.max_sessions,
                            bytes_held=s.bytes_held, max_bytes=s.max_bytes,
                            gpu_bytes_held=s.gpu_bytes_held,
                            max_gpu_bytes=s.max_gpu_bytes,
                            max_live_entries=s.max_live_entries,
                            gpu_available=s.gpu_available)
        return [_info_from_proto(m) for m in r.sessions], server

    def close_session(self, session_id: str) -> SessionInfo:
        """Closes a session by id and frees its state. Raises NOT_FOUND."""
        r = self._call(self._stub.CloseSession,
                       pb2.CloseSessionRequest(session_id=session_id), self.rpc_deadline)
        return _info_from_proto(r.session)

    # -- Internals ----------------------------------------------------------------

    @staticmethod
    def _call(method, request, timeout: Optional[float]):
        """A unary call (timeout in seconds, None: forever); its failure is
        raised as EntroKvError with the status's code and details."""
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as e:
            raise EntroKvError(e.code(), e.details() or "") from None

    @staticmethod
    def _attach_on(stream: _Stream, session_id: str, deadline: float) -> None:
        stream.send(pb2.DecodeRequest(attach=[session_id]))
        response = stream.next(deadline)
        if len(response.attach_results) != 1:
            raise EntroKvError.internal(
                f"entrokv: attach answered with {len(response.attach_results)} results")
        status = response.attach_results[0].status
        if status.code != 0:
            raise EntroKvError(code_of(status.code), status.message)

    def _hold(self, future) -> None:
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    def _close_in_background(self, session_id: str) -> None:
        try:
            self._hold(self._stub.CloseSession.future(
                pb2.CloseSessionRequest(session_id=session_id),
                timeout=self.rpc_deadline))
        except Exception:  # pragma: no cover - best effort
            pass

    def _create_server_session(self, cfg: SessionConfig,
                               deadline: float) -> Tuple[str, SessionConfig]:
        """A new server-named session: (id, effective config). Raises
        EntroKvError with the RPC's status."""
        request = pb2.CreateSessionRequest(config=_config.to_proto(cfg, pb2))
        try:
            response = self._stub.CreateSession(request, timeout=_timeout(deadline))
        except grpc.RpcError as e:
            raise EntroKvError.from_rpc(e, "CreateSession: ") from None
        effective = (_config.from_proto(response.session.config, cfg)
                     if response.session.HasField("config") else cfg)
        return response.session_id, effective

    def _channel_state(self, try_to_connect: bool) -> int:
        """The channel's connectivity (grpc_connectivity_state), asking an
        idle one to connect. grpcio has no public synchronous form of C++'s
        GetState(); where its internal one is missing, READY: the attempt
        then finds out, bounded by its deadline."""
        try:
            return int(self._raw_channel._channel.check_connectivity_state(
                try_to_connect))
        except Exception:  # pragma: no cover - another grpcio
            return _READY

    def _poke(self) -> None:
        """grpc.health.v1.Health/Check with an empty request (the server's
        overall health; no entrokv state is touched), in the background,
        wait_for_ready, for at most _POKE_TIMEOUT; one at a time. It asks
        gRPC to (re)connect the channel and, being a call in flight, makes
        grpcio poll the connection attempt. (C++ pokes only a channel in
        TRANSIENT_FAILURE, with a call that fails at once: its gRPC polls
        connection attempts by itself; grpcio's does not, and a restarted
        server was then noticed only after about 5 s, at gRPC's backup
        poll.)"""
        with self._lock:
            if self._poking is not None and not self._poking.done():
                return
            try:
                self._poking = self._channel.unary_unary(
                    "/grpc.health.v1.Health/Check").future(
                        b"", timeout=_POKE_TIMEOUT, wait_for_ready=True)
            except Exception:  # pragma: no cover - best effort
                self._poking = None

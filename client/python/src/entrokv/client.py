"""Client: an inference engine's handle on an entrokv sidecar (the Python
counterpart of client/include/entrokv/client/client.h and
client/src/client.cc). It holds one gRPC channel and makes the unary calls:
create, attach, inspect, list and close sessions; each Session it creates
(session.py) runs its own Decode stream over that channel, and a
DecodeBatch (batch.py) steps many sessions in one message.

- ``create_session`` waits at most ``create_deadline`` for the RPC and the
  stream's attach together. A failure that is not the caller's (unreachable or
  silent server, a server limit, a broken server) gives an *offline* session
  (``session.offline``, ``session.degraded_reason``) unless
  ``offline_when_unavailable=False``; the caller's own errors are raised.
  The failure semantics of steps are Session's (session.py).

Deadlines are in seconds (float; ``math.inf``: wait forever). Defaults come
from ``ENTROKV_TARGET`` and ``ENTROKV_STEP_DEADLINE_MS`` when set
(environment.py); a malformed ``ENTROKV_STEP_DEADLINE_MS`` fails ``Client()``
(INVALID_ARGUMENT), as C++'s ``Client::Connect``. TLS, mutual TLS and a bearer
token are Client options named as C++'s ClientOptions.

Thread-safety: a Client may be shared by threads; a Session is used by one
thread at a time (the engine's decode loop).

Session, StepOutcome and SessionCounters (session.py), and the other names
this module held before the package was split by C++ file, are still
importable from it.
"""

from __future__ import annotations

import collections
import functools
import threading
import time
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, List, Optional, Sequence,
                    Tuple, Union)

import grpc

from . import background_calls as _background_calls
from . import config as _config
from . import decode_stream as _decode_stream
from . import environment as _environment
from . import errors as _errors
from . import live_set as _live_set
from . import session as _session
from . import vectors as _vectors
from ._stubs import pb2, pb2_grpc
from .background_calls import BackgroundCalls, channel_state
from .config import SessionConfig, validate_config
from .decode_stream import DecodeStream, seconds_left
from .environment import (DEFAULT_CREATE_DEADLINE, DEFAULT_STEP_DEADLINE,
                          env_step_deadline, env_target)
from .errors import SERVER_SIDE, EntroKvError, invalid
from .session import Session, SessionCounters, TierCallbacks
from .session_setup import attach_on, create_server_session
from .shadow import ShadowRequest, ShadowStats, stats_from_proto
from .sketch import Sketcher
from .state_log import StateLog
from .vectors import slot_list

if TYPE_CHECKING:  # batch.py imports this module.
    from .batch import DecodeBatch


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
    # Demote tier (0 without one): entries in the tier now, moves answered.
    tier_held: int = 0
    demoted: int = 0
    promoted: int = 0


@dataclass
class SessionInfo:
    """A session as the server describes it."""

    id: str
    config: SessionConfig
    stats: SessionStats
    attached: bool
    idle: float  # Seconds since it was last detached (0 while attached).
    # Its shadow policies' measures (create_session's `shadowing`); None for
    # a session without shadows. As of every step answered before the
    # latest reply.
    shadows: Optional[ShadowStats] = None


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
    max_shadows: int = 0  # Per session; 0: shadowing is off.
    max_shadow_reference_bytes: int = 0


def _info_from_proto(m) -> SessionInfo:
    s = m.stats
    return SessionInfo(
        id=m.session_id,
        config=_config.from_proto(m.config),
        stats=SessionStats(
            live=s.live, peak_live=s.peak_live, budget=s.budget, steps=s.steps,
            last_step=s.last_step if s.HasField("last_step") else None,
            appended=s.appended, evicted=s.evicted, bytes_held=s.bytes_held,
            placement=_config._enum(s.placement, _config.PLACEMENTS, "cpu"),
            tier_held=s.tier_held, demoted=s.demoted, promoted=s.promoted),
        attached=m.attached, idle=m.idle_ms / 1000.0,
        shadows=stats_from_proto(m.shadows) if m.HasField("shadows") else None)


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
        self.target = target if target is not None else env_target()
        if not self.target:
            raise invalid("target: empty")
        env_deadline = env_step_deadline()  # Malformed: fails either way.
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
        # Background calls (closes, pokes), held until they end.
        self._background = BackgroundCalls()
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
                       shadowing: Optional[ShadowRequest] = None,
                       tier: Optional[TierCallbacks] = None,
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
        shadowing: shadow policies the server runs beside this session's
            own (entrokv.ShadowRequest; get_session(id).shadows reports
            them); a recovered session asks for them again, afresh.
        tier: a TierCallbacks for a session with a demote tier
            (tier_capacity > 0): evict, demote and promote are called with
            each step's moves, in that order (see Session).
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
            recovery_jitter=recovery_jitter, shadowing=shadowing, tier=tier)

        def offline(why: EntroKvError) -> Session:
            # The channel keeps reconnecting only while a call is in flight
            # (see _poke): without this, a client that only creates sessions
            # would find a restarted server after gRPC's 5 s backup poll.
            self._poke()
            if not offline_when_unavailable:
                raise why
            return new_session(session_id="", config=cfg, stream=None,
                               offline_reason=why)

        try:
            new_id, effective = create_server_session(self._stub, cfg, deadline,
                                                      session_id, shadowing)
        except EntroKvError as err:
            if err.code not in SERVER_SIDE:
                raise  # The caller's error, with the server's details alone.
            return offline(err)
        # A batch first reads the answers to its messages in flight (each
        # within its own step deadline); the attach's time starts after them.
        drain_start = time.monotonic()
        stream = (DecodeStream(self._stub) if _batch is None
                  else _batch._live_stream())
        try:
            attach_on(stream, new_id, deadline + time.monotonic() - drain_start)
        except EntroKvError as e:
            if _batch is None:
                stream.cancel()
            else:
                # A late answer to the attach must not be read as a step's.
                _batch._end_stream()
            self._close_in_background(new_id)
            return offline(EntroKvError(e.code, "attach: " + e.message))
        session = new_session(session_id=new_id, config=effective,
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
               recovery_jitter: float = 0.2,
               tier: Optional[TierCallbacks] = None) -> Session:
        """Attaches to an existing session (e.g. after the engine's stream
        broke). The next step is the server's last step + 1, or 0 when the
        server has none (C++'s Attach takes options.first_step there; this
        one has no `first_step`). `live_slots` are the slots the engine still
        holds for it, in append order (live ones: with a demote tier, its
        demoted entries are unknown to this session; one the server promotes
        becomes the newest live entry), all unpinned: the local fallback may
        evict an entry the server had pinned, and a recovery re-sends it
        unpinned. There is no `shadowing` either: a recovery of an attached
        session asks for no shadow policies (C++'s asks again for
        options.shadowing). Never fails open. Raises EntroKvError
        (NOT_FOUND, FAILED_PRECONDITION, ...)."""
        create_deadline = (self.create_deadline if create_deadline is None
                           else create_deadline)
        step_deadline = self.step_deadline if step_deadline is None else step_deadline
        deadline = time.monotonic() + create_deadline
        got = self._call(self._stub.GetSession,
                         pb2.GetSessionRequest(session_id=session_id),
                         seconds_left(deadline))
        info = _info_from_proto(got.session)
        first = info.stats.last_step + 1 if info.stats.last_step is not None else 0
        sketcher = Sketcher(info.config, projection)
        stream = DecodeStream(self._stub)
        try:
            attach_on(stream, session_id, deadline)
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
                          recovery_jitter=recovery_jitter, tier=tier)
        session._live.append(slot_list(list(live_slots)), [])
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
                            gpu_available=s.gpu_available,
                            max_shadows=s.max_shadows,
                            max_shadow_reference_bytes=s.max_shadow_reference_bytes)
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

    def _close_in_background(self, session_id: str) -> None:
        self._background.close_session(self._stub, session_id, self.rpc_deadline)

    def _channel_state(self, try_to_connect: bool) -> int:
        """The channel's connectivity (see background_calls.channel_state)."""
        return channel_state(self._raw_channel, try_to_connect)

    def _poke(self) -> None:
        """Asks the channel to (re)connect (see BackgroundCalls.poke)."""
        self._background.poke(self._channel)


# --- Names kept for code that imported them from here ---------------------------
# This module held them before the package was split by C++ file; each is
# the object of the module that holds it now.
StepOutcome = _session.StepOutcome
DEFAULT_TARGET = _environment.DEFAULT_TARGET
_env_target, _env_step_deadline = env_target, env_step_deadline
_Stream, _timeout, _END = DecodeStream, seconds_left, _decode_stream._END
(_IDLE, _CONNECTING, _READY, _TRANSIENT_FAILURE, _SHUTDOWN) = (
    _background_calls.IDLE, _background_calls.CONNECTING,
    _background_calls.READY, _background_calls.TRANSIENT_FAILURE,
    _background_calls.SHUTDOWN)
_POKE_EVERY = _background_calls.POKE_EVERY
_POKE_TIMEOUT = _background_calls.POKE_TIMEOUT
_Pending = _session._Pending
_U64_MAX = _vectors._U64_MAX
_host_array, _slot_list, _pinned_list = (
    _vectors.host_array, slot_list, _vectors.pinned_list)
as_vector, convert, entropy_of_logits, to_float32 = (
    _vectors.as_vector, _vectors.convert, _vectors.entropy_of_logits,
    _vectors.to_float32)
LiveSet, StreamingRule = _live_set.LiveSet, _live_set.StreamingRule
code_of, failed_precondition = _errors.code_of, _errors.failed_precondition
policy_needs_entropy = _config.policy_needs_entropy

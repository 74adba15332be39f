"""Calls a Client sends in the background and does not wait for: the close
of a server session it gave up, and the health check that pokes a channel
which is not connected (client/src/background_calls.h: CloseInBackground
and HealthWatch); and the channel's connectivity as a degraded session
reads it before a recovery attempt.

Thread-safety: BackgroundCalls is thread-safe; any session's thread may
start a call.
"""

from __future__ import annotations

import threading
from typing import Optional

from ._stubs import pb2

# grpc_connectivity_state values, as the channel reports them.
IDLE, CONNECTING, READY, TRANSIENT_FAILURE, SHUTDOWN = range(5)
# How often a degraded session may poke a channel that is not READY (gRPC's
# shortest reconnect backoff), and how long a poke may wait.
POKE_EVERY = 0.1
POKE_TIMEOUT = 1.0


def channel_state(raw_channel, try_to_connect: bool) -> int:
    """The channel's connectivity (grpc_connectivity_state), asking an idle
    one to connect. grpcio has no public synchronous form of C++'s
    GetState(); where its internal one is missing, READY: the attempt then
    finds out, bounded by its deadline."""
    try:
        return int(raw_channel._channel.check_connectivity_state(try_to_connect))
    except Exception:  # pragma: no cover - another grpcio
        return READY


class BackgroundCalls:
    """The background calls of one Client, held until they end: a dropped
    grpc future is cancelled when it is garbage-collected."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set = set()
        self._poking = None  # The health call of poke(), while in flight.

    def _hold(self, future) -> None:
        self._held.add(future)
        future.add_done_callback(self._held.discard)

    def close_session(self, stub, session_id: str,
                      timeout: Optional[float]) -> None:
        """Sends CloseSession for `session_id` and returns at once: best
        effort, bounded by `timeout` (seconds); its outcome is ignored."""
        try:
            self._hold(stub.CloseSession.future(
                pb2.CloseSessionRequest(session_id=session_id), timeout=timeout))
        except Exception:  # pragma: no cover - best effort
            pass

    def poke(self, channel) -> None:
        """grpc.health.v1.Health/Check with an empty request (the server's
        overall health; no entrokv state is touched), in the background,
        wait_for_ready, for at most POKE_TIMEOUT; one at a time. It asks
        gRPC to (re)connect the channel and, being a call in flight, makes
        grpcio poll the connection attempt. (C++'s HealthWatch sends checks
        that fail at once while the channel is down: its gRPC polls
        connection attempts by itself; grpcio's does not, and a restarted
        server was then noticed only after about 5 s, at gRPC's backup
        poll.)"""
        with self._lock:
            if self._poking is not None and not self._poking.done():
                return
            try:
                self._poking = channel.unary_unary(
                    "/grpc.health.v1.Health/Check").future(
                        b"", timeout=POKE_TIMEOUT, wait_for_ready=True)
            except Exception:  # pragma: no cover - best effort
                self._poking = None

"""What creating a session, attaching one and a recovery share: a new
server session, and its attach to a Decode stream
(client/src/session_setup.cc: CreateServerSession, AttachOn)."""

from __future__ import annotations

from typing import Optional, Tuple

import grpc

from . import config as _config
from ._stubs import pb2
from .config import SessionConfig
from .decode_stream import DecodeStream, seconds_left
from .errors import SERVER_SIDE, EntroKvError, code_of
from .shadow import ShadowRequest


def create_server_session(stub, cfg: SessionConfig, deadline: float,
                          session_id: str = "",
                          shadowing: Optional[ShadowRequest] = None
                          ) -> Tuple[str, SessionConfig]:
    """Calls CreateSession (`session_id` empty: the server names it),
    waiting until the time.monotonic() `deadline` at most; returns (id,
    effective config: defaults filled in by the server). Raises
    EntroKvError with the RPC's status: its details alone for the caller's
    errors, after "CreateSession: " for a failure of the server's side
    (SERVER_SIDE)."""
    request = pb2.CreateSessionRequest(config=_config.to_proto(cfg, pb2),
                                       session_id=session_id)
    if shadowing is not None and shadowing.policies:
        request.shadowing.CopyFrom(shadowing.to_proto(cfg, pb2))
    try:
        response = stub.CreateSession(request, timeout=seconds_left(deadline))
    except grpc.RpcError as e:
        err = EntroKvError.from_rpc(e, "CreateSession: ")
        if err.code not in SERVER_SIDE:
            raise EntroKvError(err.code, e.details() or "") from None
        raise err from None
    effective = (_config.from_proto(response.session.config, cfg)
                 if response.session.HasField("config") else cfg)
    return response.session_id, effective


def attach_on(stream: DecodeStream, session_id: str, deadline: float) -> None:
    """Attaches `session_id` to `stream`, waiting until `deadline` at most.
    Raises EntroKvError: the stream's failure, or the attach's status."""
    stream.send(pb2.DecodeRequest(attach=[session_id]))
    response = stream.next(deadline)
    if len(response.attach_results) != 1:
        raise EntroKvError.internal(
            f"entrokv: attach answered with {len(response.attach_results)} results")
    status = response.attach_results[0].status
    if status.code != 0:
        raise EntroKvError(code_of(status.code), status.message)

"""A scripted entrokv server in Python, for the client's failure paths.

It implements the EntroKv service just enough for a client: CreateSession
names sessions s1, s2, ...; Decode answers every attach with OK and every
step with a result that evicts nothing; CloseSession records the id. While
`swallow` is set, Decode messages (attaches and steps) are recorded and never
answered, as a stalled server's; a message with steps is answered after
`step_delay` seconds; with `require_token`, CreateSession
refuses a call without that bearer token (UNAUTHENTICATED). Every call's metadata is recorded, so tests
can check what the client sent (e.g. its bearer token).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import grpc

from entrokv._stubs import pb2, pb2_grpc


@dataclass
class SentStep:
    session_id: str
    step: int
    slot_ids: List[int]
    pinned: List[bool]
    keys: bytes
    answered: bool


class FakeEntroKv(pb2_grpc.EntroKvServicer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.swallow = threading.Event()
        self.created: List[str] = []
        self.closed: List[str] = []
        self.attached: List[Tuple[str, bool]] = []  # (id, answered)
        self.steps: List[SentStep] = []
        self.calls: List[Tuple[str, Dict[str, str]]] = []  # (method, metadata)
        # Set: CreateSession answers UNAUTHENTICATED without this token.
        self.require_token: Optional[str] = None
        self.step_delay = 0.0  # Seconds before a message with steps is answered.

    def _record_call(self, method: str, context) -> None:
        with self.lock:
            self.calls.append((method, dict(context.invocation_metadata())))

    def CreateSession(self, request, context):
        self._record_call("CreateSession", context)
        if self.require_token is not None and \
                dict(context.invocation_metadata()).get("authorization") != \
                f"Bearer {self.require_token}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")
        with self.lock:
            sid = f"s{len(self.created) + 1}"
            self.created.append(sid)
        return pb2.CreateSessionResponse(session_id=sid)

    def CloseSession(self, request, context):
        self._record_call("CloseSession", context)
        with self.lock:
            self.closed.append(request.session_id)
        return pb2.CloseSessionResponse()

    def Decode(self, request_iterator, context):
        self._record_call("Decode", context)
        for request in request_iterator:
            answer = not self.swallow.is_set()
            response = pb2.DecodeResponse()
            with self.lock:
                for sid in request.attach:
                    self.attached.append((sid, answer))
                    response.attach_results.add(session_id=sid)
                for st in request.steps:
                    self.steps.append(SentStep(
                        st.session_id, st.step, list(st.append.slot_ids),
                        list(st.append.pinned), bytes(st.append.keys), answer))
                    response.results.add(session_id=st.session_id, step=st.step,
                                         budget=100)
            if answer:
                if request.steps and self.step_delay > 0:
                    time.sleep(self.step_delay)
                yield response

    def wait_closed(self, session_id: str, timeout: float = 5.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if session_id in self.closed:
                    return True
            time.sleep(0.01)
        return False


class FakeServer:
    """A FakeEntroKv served on a unix socket (`target`), or on 127.0.0.1 with
    the given server credentials."""

    def __init__(self, credentials: Optional[grpc.ServerCredentials] = None,
                 socket_path: Optional[str] = None) -> None:
        self.service = FakeEntroKv()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        pb2_grpc.add_EntroKvServicer_to_server(self.service, self.server)
        if credentials is not None:
            port = self.server.add_secure_port("127.0.0.1:0", credentials)
            self.target = f"127.0.0.1:{port}"
        else:
            if socket_path is None:
                socket_path = os.path.join(tempfile.mkdtemp(prefix="entrokv-fake-"),
                                           "s.sock")
            self.target = "unix:" + socket_path
            self.server.add_insecure_port(self.target)
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)

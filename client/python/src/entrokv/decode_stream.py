"""DecodeStream: one Decode bidi stream as a Session (or a DecodeBatch)
drives it: send() a request, next() its response in order, each wait
bounded by a deadline (client/src/decode_stream.h).

Requests go through a queue that grpcio's request iterator reads; a reader
thread puts the responses in another queue, so that a wait can have a
deadline and a late response stays available (as C++'s callback stream).

Thread-safety: one caller thread at a time (the session's); the reader
thread shares only the queues.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from typing import Any, Optional

import grpc

from .errors import EntroKvError

_END = object()  # Ends the request iterator.


def seconds_left(deadline: float) -> Optional[float]:
    """Seconds left until a time.monotonic() deadline (None: forever), as
    grpcio's `timeout` takes them."""
    if math.isinf(deadline):
        return None
    return max(0.0, deadline - time.monotonic())


class DecodeStream:
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
            item = self._responses.get(timeout=seconds_left(deadline))
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

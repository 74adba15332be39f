"""The one exception type of the entrokv client."""

from __future__ import annotations

import grpc


class EntroKvError(Exception):
    """A failed call or step: a gRPC status code and a message that names the
    offending field (e.g. "append.keys: 3 elements, expected ...")."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def internal(cls, message: str) -> "EntroKvError":
        return cls(grpc.StatusCode.INTERNAL, message)

    @classmethod
    def from_rpc(cls, error: grpc.RpcError, prefix: str = "") -> "EntroKvError":
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(code or grpc.StatusCode.UNKNOWN, prefix + (details or ""))


def invalid(message: str) -> EntroKvError:
    return EntroKvError(grpc.StatusCode.INVALID_ARGUMENT, message)


def failed_precondition(message: str) -> EntroKvError:
    return EntroKvError(grpc.StatusCode.FAILED_PRECONDITION, message)


# Failures that are not the caller's: the server unreachable, silent, at a
# limit or broken (client/src/session_setup.h IsServerSideFailure).
SERVER_SIDE = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN, grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED, grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.UNIMPLEMENTED,
})

_BY_VALUE = {c.value[0]: c for c in grpc.StatusCode}


def code_of(value: int) -> grpc.StatusCode:
    """The grpc.StatusCode of a numeric status (the wire's Status.code)."""
    return _BY_VALUE.get(value, grpc.StatusCode.UNKNOWN)

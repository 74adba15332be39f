#!/usr/bin/env python3
"""Calls grpc.health.v1.Health/Check once and exits 0 when the answer is SERVING.

    deploy/grpc_health_check.py TARGET [--service NAME] [--timeout SECONDS]

TARGET is host:port or unix:/path. Used by deploy/smoke-test.sh in place of
grpc_health_probe (not packaged by Debian). Needs only python3-grpcio: the
request and response are encoded by hand, as the health protocol's messages
have one field each (HealthCheckRequest.service = 1, a string;
HealthCheckResponse.status = 1, an enum), so no generated stubs are needed.
"""

import argparse
import sys

import grpc

_STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_request(service: str) -> bytes:
    if not service:
        return b""  # proto3: the default value is not on the wire
    data = service.encode()
    return b"\x0a" + _varint(len(data)) + data


def decode_status(response: bytes) -> int:
    """Returns HealthCheckResponse.status; unknown fields are skipped."""
    status, i = 0, 0
    while i < len(response):
        key, i = _read_varint(response, i)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, i = _read_varint(response, i)
            if field == 1:
                status = value
        elif wire_type == 2:
            length, i = _read_varint(response, i)
            i += length
        elif wire_type == 5:
            i += 4
        elif wire_type == 1:
            i += 8
        else:
            raise ValueError(f"unexpected wire type {wire_type}")
    return status


def _read_varint(data: bytes, i: int):
    value, shift = 0, 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("--service", default="")
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()
    with grpc.insecure_channel(args.target) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            response = check(encode_request(args.service), timeout=args.timeout)
        except grpc.RpcError as error:
            print(f"health {args.target}: {error.code().name}: {error.details()}")
            return 1
    status = decode_status(response)
    name = _STATUS_NAMES.get(status, str(status))
    print(f"health {args.target}: {name}")
    return 0 if status == 1 else 1


if __name__ == "__main__":
    sys.exit(main())

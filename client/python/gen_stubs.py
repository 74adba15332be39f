#!/usr/bin/env python3
"""Generates the entrokv gRPC stubs from ../../proto into OUT/entrokv/v1/.

Uses the system protoc and Debian's grpc_python_plugin (grpc_tools' bundled
protoc 3.5 rejects proto3 `optional`). Run by setup.py at build time; run it
by hand for a PYTHONPATH checkout:

    /usr/bin/python3 client/python/gen_stubs.py client/python/src
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))


def _find(tool: str, env: str) -> str:
    path = os.environ.get(env) or shutil.which(tool)
    if not path:
        raise RuntimeError(
            f"entrokv: {tool} not found (Debian: apt-get install "
            "protobuf-compiler protobuf-compiler-grpc); or set " + env)
    return path


def generate(out_root: str, proto_root: str = DEFAULT_PROTO_ROOT) -> list[str]:
    """Writes entrokv/v1/{__init__,entrokv_pb2,entrokv_pb2_grpc}.py under out_root."""
    proto = os.path.join(proto_root, "entrokv", "v1", "entrokv.proto")
    if not os.path.isfile(proto):
        raise RuntimeError(
            f"entrokv: {proto} not found: build from a checkout of the "
            "entrokv repository (the stubs are generated from proto/)")
    protoc = _find("protoc", "ENTROKV_PROTOC")
    plugin = _find("grpc_python_plugin", "ENTROKV_GRPC_PYTHON_PLUGIN")
    pkg = os.path.join(out_root, "entrokv", "v1")
    os.makedirs(pkg, exist_ok=True)
    subprocess.run(
        [protoc, f"-I{proto_root}", f"--python_out={out_root}",
         f"--grpc_out={out_root}", f"--plugin=protoc-gen-grpc={plugin}",
         proto],
        check=True)
    init = os.path.join(pkg, "__init__.py")
    with open(init, "w", encoding="utf-8") as f:
        f.write('"""Generated from proto/entrokv/v1 at build time; do not edit."""\n')
    return [init, os.path.join(pkg, "entrokv_pb2.py"),
            os.path.join(pkg, "entrokv_pb2_grpc.py")]


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: gen_stubs.py OUT_ROOT [PROTO_ROOT]")
    for path in generate(*sys.argv[1:]):
        print(path)

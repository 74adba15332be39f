"""Fixtures of the Python client's tests: the package (generated stubs in a
temporary copy, or the installed one with ENTROKV_PYTHON_INSTALLED=1) and a
real entrokv-server on a unix socket under a temporary directory.

The server binary: $ENTROKV_SERVER_BINARY, else $ENTROKV_BUILD_DIR/server/
entrokv-server, else build/server/entrokv-server. run.sh skips (exit 0) when
it is missing; run directly, the tests that need it are skipped.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import source_package
from source_package import PKG_DIR, REPO

source_package.prepare()


# What the core library links against (for the C++ reference programs).
ABSL = ["absl_status", "absl_statusor", "absl_strings", "absl_str_format",
        "absl_flat_hash_set", "absl_flat_hash_map", "absl_hash", "absl_raw_hash_set"]


def build_dir() -> str:
    return os.environ.get("ENTROKV_BUILD_DIR", os.path.join(REPO, "build"))


def build_cpp_reference(source: str, libs, includes=("core/include",)) -> str:
    """Builds tests/python/cpp/`source` against the build tree's static
    `libs` (paths under the build directory) and returns the binary; skips
    without g++, pkg-config or the libraries. A core built with CUDA needs
    the CUDA runtime too: the link is retried with it."""
    libs = [os.path.join(build_dir(), p) for p in libs]
    cxx = shutil.which("g++")
    if cxx is None or shutil.which("pkg-config") is None or \
            not all(os.path.exists(p) for p in libs):
        pytest.skip(f"no g++, pkg-config or {', '.join(libs)}: "
                    "cannot build the C++ reference")
    absl = subprocess.run(["pkg-config", "--libs", *ABSL], check=True,
                          capture_output=True, text=True).stdout.split()
    out = os.path.join(tempfile.mkdtemp(), os.path.splitext(source)[0])
    cmd = [cxx, "-std=c++20", "-O2", *(f"-I{REPO}/{d}" for d in includes),
           os.path.join(REPO, "tests", "python", "cpp", source), *libs, *absl,
           "-o", out]
    cuda = ["-L/usr/local/cuda/lib64", "-lcudart_static", "-ldl", "-lrt", "-lpthread"]
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        subprocess.run(cmd + cuda, check=True)  # Its errors show in the report.
    return out


def server_binary() -> str:
    env = os.environ.get("ENTROKV_SERVER_BINARY")
    if env:
        return env
    build = build_dir()
    if not os.path.isabs(build):
        build = os.path.join(REPO, build)
    return os.path.join(build, "server", "entrokv-server")


class Server:
    """A running entrokv-server; `target` is its unix socket."""

    def __init__(self, extra_flags=(), directory=None, tcp_port=None):
        """`directory`: a dead server's, to restart on its socket path.
        `tcp_port`: listen on 127.0.0.1:`tcp_port` instead of a unix socket
        (a TCP connect is asynchronous in gRPC; a unix one is not)."""
        binary = server_binary()
        if not os.access(binary, os.X_OK):
            pytest.skip(f"no entrokv-server at {binary} (build it first)")
        self.dir = directory or tempfile.mkdtemp(prefix="entrokv-srv-")
        self.socket = os.path.join(self.dir, "s.sock")
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.tcp_port = tcp_port
        self.target = ("unix:" + self.socket if tcp_port is None
                       else f"127.0.0.1:{tcp_port}")
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(
            [binary, f"--listen={self.target}", "--gpu=false",
             "--log_level=warn", *extra_flags],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self._listening():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail("entrokv-server did not start: " +
                            open(os.path.join(self.dir, "server.log")).read())
            time.sleep(0.02)

    def _listening(self) -> bool:
        if self.tcp_port is None:
            return os.path.exists(self.socket)
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.tcp_port)) == 0

    def pause(self) -> None:
        """SIGSTOP, returning once every thread has stopped."""
        self.proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    return
            time.sleep(0.005)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture()
def own_server():
    """A server of the test's own (for tests that stall or stop it)."""
    s = Server()
    yield s
    s.stop()


def free_tcp_port() -> int:
    """A TCP port on 127.0.0.1 that is free when this returns."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def own_tcp_server():
    """As own_server, on a TCP port of 127.0.0.1."""
    s = Server(tcp_port=free_tcp_port())
    yield s
    s.stop()


@pytest.fixture()
def client(server):
    import entrokv
    c = entrokv.Client(server.target, step_deadline=5.0, create_deadline=5.0)
    yield c
    c.close()

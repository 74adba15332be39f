"""The documented install works: pip builds the package (generating the
stubs from proto/ with the system protoc) and the result imports on its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from conftest import PKG_DIR


def test_pip_install_builds_stubs():
    target = tempfile.mkdtemp(prefix="entrokv-pip-")
    src = tempfile.mkdtemp(prefix="entrokv-src-")
    try:
        # Build from a copy so that the checkout gets no build/ folder.
        repo = os.path.dirname(os.path.dirname(PKG_DIR))
        shutil.copytree(os.path.join(repo, "proto"), os.path.join(src, "proto"))
        pkg = os.path.join(src, "client", "python")
        shutil.copytree(PKG_DIR, pkg, ignore=shutil.ignore_patterns(
            "build", "*.egg-info", "v1", "__pycache__"))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--target", target, pkg],
                       check=True, capture_output=True)
        assert os.path.exists(os.path.join(target, "entrokv", "v1", "entrokv_pb2_grpc.py"))
        out = subprocess.run(
            [sys.executable, "-c",
             "import entrokv; c = entrokv.Client('unix:/nonexistent.sock', "
             "create_deadline=0.2); s = c.create_session('window', budget=2, "
             "shape=entrokv.Shape(head_dim=4)); print(entrokv.__file__, s.offline)"],
            env={**os.environ, "PYTHONPATH": target}, cwd=target,
            capture_output=True, text=True, check=True).stdout
        assert out.startswith(os.path.join(target, "entrokv")) and out.strip().endswith("True")
    finally:
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(src, ignore_errors=True)

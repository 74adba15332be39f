"""Makes `import entrokv` find the package of this source tree: a temporary
copy of client/python/src/entrokv with its gRPC stubs generated from proto/
(the package's own gen_stubs), or, with ENTROKV_PYTHON_INSTALLED=1, the
installed package as it is. Used by the tests' conftest.py and by
tests/fault/fault_driver.py."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
PKG_DIR = os.path.join(REPO, "client", "python")


def prepare() -> None:
    if os.environ.get("ENTROKV_PYTHON_INSTALLED") == "1":
        return
    root = tempfile.mkdtemp(prefix="entrokv-py-")
    shutil.copytree(os.path.join(PKG_DIR, "src", "entrokv"),
                    os.path.join(root, "entrokv"),
                    ignore=shutil.ignore_patterns("v1", "__pycache__"))
    sys.path.insert(0, PKG_DIR)
    import gen_stubs  # noqa: E402
    sys.path.remove(PKG_DIR)
    gen_stubs.generate(root, os.path.join(REPO, "proto"))
    sys.path.insert(0, root)

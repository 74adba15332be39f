"""The package's layout: each module mirrors a file of the C++ library of
the same name, and what `entrokv` and `entrokv.client` exported before
client.py was split by C++ file is still importable from them."""

from __future__ import annotations

import importlib
import os

import entrokv
from conftest import REPO

# The modules without a C++ file of their name, and what stands for it.
NO_NAMESAKE = {
    "errors": "absl::Status; client/src/convert.h converts gRPC's",
}
CPP_DIRS = ("client/src", "client/include/entrokv/client",
            "core/include/entrokv/core")

# entrokv.client's own names before the split (its imports of the standard
# library, typing and numpy aside).
CLIENT_NAMES = """
    Client DEFAULT_CREATE_DEADLINE DEFAULT_STEP_DEADLINE DEFAULT_TARGET
    EntroKvError LiveSet SERVER_SIDE ServerInfo Session SessionConfig
    SessionCounters SessionInfo SessionStats Sketcher StateLog StepOutcome
    StreamingRule _BearerToken _CONNECTING _CallDetails _END _IDLE
    _POKE_EVERY _POKE_TIMEOUT _Pending _READY _SHUTDOWN _Stream
    _TRANSIENT_FAILURE _U64_MAX _channel_credentials _config
    _env_step_deadline _env_target _host_array _info_from_proto
    _pinned_list _read_pem _slot_list _timeout as_vector code_of convert
    entropy_of_logits failed_precondition invalid pb2 pb2_grpc
    policy_needs_entropy to_float32 validate_config
""".split()


def package_modules():
    folder = os.path.dirname(entrokv.__file__)
    return sorted(name[:-3] for name in os.listdir(folder)
                  if name.endswith(".py") and not name.startswith("_"))


def test_each_module_has_a_cpp_namesake():
    missing = []
    for module in package_modules():
        if module in NO_NAMESAKE:
            continue
        if not any(os.path.exists(os.path.join(REPO, d, module + ext))
                   for d in CPP_DIRS for ext in (".h", ".cc")):
            missing.append(module)
    assert missing == [], f"modules without a C++ file of their name: {missing}"


def test_package_exports_what_it_did():
    for name in entrokv.__all__:
        assert hasattr(entrokv, name), name


def test_client_module_keeps_its_names():
    client = importlib.import_module("entrokv.client")
    missing = [name for name in CLIENT_NAMES if not hasattr(client, name)]
    assert missing == []
    # The same objects, not copies: a class from either place is the same.
    assert client.Session is entrokv.Session
    assert client.StepOutcome is entrokv.StepOutcome
    assert client._Stream is importlib.import_module(
        "entrokv.decode_stream").DecodeStream

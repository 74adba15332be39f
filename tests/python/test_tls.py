"""TLS, mutual TLS and the bearer token (ClientOptions' tls_root_certs_file,
tls_cert_file, tls_key_file, bearer_token), against the scripted Python
server with throwaway certificates made by the `openssl` CLI at test time.
(The real server gains --tls_cert/--auth_token_file on another branch; these
tests check what the client builds and sends.)"""

from __future__ import annotations

import os
import shutil
import subprocess

import grpc
import numpy as np
import pytest

import entrokv
from entrokv import EntroKvError, Shape

from fake_server import FakeServer

F32 = Shape(layers=1, kv_heads=1, q_heads=1, head_dim=4, element_type="f32")
TOKEN = "s3cr3t-token"


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   capture_output=True)


def _ca(d, name):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
             "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out",
             f"{name}.pem", cwd=d)


def _leaf(d, name, ca, ext):
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(ext + "\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem",
             "-CAkey", f"{ca}.key", "-CAcreateserial", "-days", "1",
             "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI to make test certificates")
    d = str(tmp_path_factory.mktemp("certs"))
    _ca(d, "ca")
    _ca(d, "other-ca")
    _leaf(d, "server", "ca",
          "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
          "extendedKeyUsage=serverAuth")
    _leaf(d, "client", "ca", "extendedKeyUsage=clientAuth")
    _leaf(d, "stranger", "other-ca", "extendedKeyUsage=clientAuth")
    return lambda name: os.path.join(d, name)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def mtls_server(certs):
    creds = grpc.ssl_server_credentials(
        [(_read(certs("server.key")), _read(certs("server.pem")))],
        root_certificates=_read(certs("ca.pem")), require_client_auth=True)
    f = FakeServer(credentials=creds)
    yield f
    f.stop()


def _session(client):
    return client.create_session("window", budget=8, shape=F32,
                                 offline_when_unavailable=True)


def test_mtls_with_token_is_served_and_token_rides_every_call(certs, mtls_server):
    mtls_server.service.calls.clear()
    c = entrokv.Client(mtls_server.target, create_deadline=5.0, step_deadline=5.0,
                       tls_root_certs_file=certs("ca.pem"),
                       tls_cert_file=certs("client.pem"),
                       tls_key_file=certs("client.key"), bearer_token=TOKEN)
    s = _session(c)
    assert not s.offline, s.degraded_reason
    o = s.step([1], np.zeros(4, np.float32), np.ones(4, np.float32))
    assert not o.fallback
    session_id = s.id
    s.close()
    calls = list(mtls_server.service.calls)
    methods = {m for m, _ in calls}
    assert {"CreateSession", "Decode", "CloseSession"} <= methods
    for method, metadata in calls:
        assert metadata.get("authorization") == f"Bearer {TOKEN}", method
    assert session_id in mtls_server.service.closed
    c.close()


def test_plaintext_client_gets_no_service_from_tls_server(mtls_server):
    c = entrokv.Client(mtls_server.target, create_deadline=2.0)
    s = _session(c)
    assert s.offline and s.degraded_reason.code == grpc.StatusCode.UNAVAILABLE
    c.close()


@pytest.mark.parametrize("roots, cert, key", [
    ("ca.pem", None, None),                  # no client certificate
    ("ca.pem", "stranger.pem", "stranger.key"),  # client cert of another CA
    ("other-ca.pem", "client.pem", "client.key"),  # server of another CA
], ids=["no_client_certificate", "client_of_another_ca",
        "server_of_another_ca"])
def test_mtls_refusals_give_an_offline_session(certs, mtls_server, roots,
                                                cert, key):
    c = entrokv.Client(mtls_server.target, create_deadline=2.0,
                       tls_root_certs_file=certs(roots),
                       tls_cert_file=certs(cert) if cert else "",
                       tls_key_file=certs(key) if key else "")
    assert _session(c).offline
    c.close()


def test_token_on_plaintext_unix_socket():
    f = FakeServer()
    try:
        c = entrokv.Client(f.target, create_deadline=2.0, bearer_token=TOKEN)
        s = _session(c)
        assert not s.offline
        s.step([1], np.zeros(4, np.float32), np.ones(4, np.float32))
        c.close_session(s.id)
        got = {m: md.get("authorization") for m, md in f.service.calls}
        assert got == {"CreateSession": f"Bearer {TOKEN}",
                       "Decode": f"Bearer {TOKEN}",
                       "CloseSession": f"Bearer {TOKEN}"}
        c.close()
        # Without the option, no authorization header at all.
        f.service.calls.clear()
        c = entrokv.Client(f.target, create_deadline=2.0)
        _session(c)
        assert all("authorization" not in md for _, md in f.service.calls)
        c.close()
    finally:
        f.stop()


def test_wrong_token_is_the_callers_error():
    f = FakeServer()
    f.service.require_token = TOKEN
    try:
        for token in ("", "wrong"):
            c = entrokv.Client(f.target, create_deadline=2.0, bearer_token=token)
            with pytest.raises(EntroKvError) as e:
                _session(c)
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
            c.close()
        c = entrokv.Client(f.target, create_deadline=2.0, bearer_token=TOKEN)
        assert not _session(c).offline
        c.close()
    finally:
        f.stop()


def test_bad_tls_options_are_rejected(certs, tmp_path):
    cases = [
        ({"tls_root_certs_file": certs("ca.pem"),
          "tls_cert_file": certs("client.pem")}, grpc.StatusCode.INVALID_ARGUMENT,
         "tls_cert_file and tls_key_file"),
        ({"tls_cert_file": certs("client.pem"), "tls_key_file": certs("client.key")},
         grpc.StatusCode.INVALID_ARGUMENT, "needs tls_root_certs_file"),
        ({"tls_root_certs_file": str(tmp_path / "missing.pem")},
         grpc.StatusCode.NOT_FOUND, "tls_root_certs_file: cannot read"),
    ]
    for kwargs, code, text in cases:
        with pytest.raises(EntroKvError) as e:
            entrokv.Client("127.0.0.1:1", **kwargs)
        assert e.value.code == code and text in e.value.message, kwargs

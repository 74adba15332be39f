"""Configuration from the environment, as the Kubernetes manifests promise:
ENTROKV_TARGET and ENTROKV_STEP_DEADLINE_MS when the engine leaves the target
or the step deadline unset (client.h DefaultTarget, session.h
DefaultStepDeadline)."""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest

import entrokv
from entrokv import EntroKvError, Shape

from fake_server import FakeServer

F32 = Shape(layers=1, kv_heads=1, q_heads=1, head_dim=4, element_type="f32")


@pytest.fixture()
def fake():
    f = FakeServer()
    yield f
    f.stop()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("ENTROKV_TARGET", raising=False)
    monkeypatch.delenv("ENTROKV_STEP_DEADLINE_MS", raising=False)


def test_defaults_without_environment():
    c = entrokv.Client()
    assert c.target == "unix:/run/entrokv/entrokv.sock"
    assert c.step_deadline == 0.1
    c.close()


def test_empty_variables_count_as_unset(monkeypatch):
    monkeypatch.setenv("ENTROKV_TARGET", "")
    monkeypatch.setenv("ENTROKV_STEP_DEADLINE_MS", "")
    c = entrokv.Client()
    assert c.target == "unix:/run/entrokv/entrokv.sock"
    assert c.step_deadline == 0.1
    c.close()


def test_target_from_environment_reaches_that_server(fake, monkeypatch):
    monkeypatch.setenv("ENTROKV_TARGET", fake.target)
    c = entrokv.Client(create_deadline=2.0)
    assert c.target == fake.target
    s = c.create_session("window", budget=8, shape=F32)
    assert not s.offline and s.id == "s1"
    assert fake.service.created == ["s1"]
    c.close()


def test_engine_target_wins_over_environment(fake, monkeypatch):
    monkeypatch.setenv("ENTROKV_TARGET", "unix:/nonexistent/entrokv.sock")
    c = entrokv.Client(fake.target, create_deadline=2.0)
    assert not c.create_session("window", budget=8, shape=F32).offline
    c.close()


def test_step_deadline_from_environment_bounds_steps(fake, monkeypatch):
    monkeypatch.setenv("ENTROKV_STEP_DEADLINE_MS", "150.5")
    c = entrokv.Client(fake.target, create_deadline=2.0)
    assert c.step_deadline == pytest.approx(0.1505)
    s = c.create_session("window", budget=8, shape=F32)
    fake.service.swallow.set()
    start = time.monotonic()
    o = s.step([1], np.zeros(4, np.float32), np.ones(4, np.float32))
    took = time.monotonic() - start
    assert o.fallback and s.counters().fallback_deadline == 1
    assert 0.14 <= took < 1.0
    c.close()


def test_engine_step_deadline_wins_over_environment(monkeypatch):
    monkeypatch.setenv("ENTROKV_STEP_DEADLINE_MS", "150")
    c = entrokv.Client("unix:/nonexistent", step_deadline=0.02)
    assert c.step_deadline == 0.02
    c.close()


@pytest.mark.parametrize("raw", ["abc", "0", "0.0005", "-5", "inf", "nan", "1e13",
                                 "1_0"])
def test_malformed_step_deadline_fails_the_client(monkeypatch, raw):
    monkeypatch.setenv("ENTROKV_STEP_DEADLINE_MS", raw)
    for kwargs in ({}, {"step_deadline": 0.05}):  # Set or not, as Connect().
        with pytest.raises(EntroKvError) as e:
            entrokv.Client("unix:/nonexistent", **kwargs)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "ENTROKV_STEP_DEADLINE_MS" in e.value.message

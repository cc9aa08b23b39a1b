"""ntklab.service.model_checks: large ONNX files are checked a few at a time; a small one never waits (issue 25, item 7)."""

from __future__ import annotations

import threading
import time

import pytest

from ntklab.api_schemas.problems import SERVER_BUSY
from ntklab.service.model_checks import LARGE_MODEL_BYTES, ModelChecks
from ntklab.service.problems import ProblemError


def holding_a_turn(checks: ModelChecks, release: threading.Event) -> threading.Thread:
    started = threading.Event()

    def hold() -> None:
        with checks.turn(LARGE_MODEL_BYTES):
            started.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    assert started.wait(5)
    return thread


def test_a_large_check_past_the_limit_waits_then_is_a_503_naming_the_setting():
    checks, release = ModelChecks(limit=1, wait_s=0.3, retry_after_s=2), threading.Event()
    holder = holding_a_turn(checks, release)
    began = time.monotonic()
    with pytest.raises(ProblemError) as refused, checks.turn(LARGE_MODEL_BYTES):
        pass
    waited = time.monotonic() - began
    release.set()
    holder.join()
    assert 0.3 <= waited < 2
    problem = refused.value.problem
    assert problem.status == 503 and problem.type == SERVER_BUSY and refused.value.headers["Retry-After"] == "2"
    assert problem.errors[0].field == "concurrent_model_checks" and problem.errors[0].limit == 1
    assert "max_concurrent_model_checks" in problem.errors[0].message


def test_a_waiting_check_runs_when_a_turn_frees_and_a_small_one_never_waits():
    checks, release = ModelChecks(limit=1, wait_s=5, retry_after_s=2), threading.Event()
    holder = holding_a_turn(checks, release)
    began = time.monotonic()
    with checks.turn(LARGE_MODEL_BYTES - 1):  # small: at once, though the one turn is taken
        assert time.monotonic() - began < 0.1
    threading.Timer(0.3, release.set).start()
    with checks.turn(LARGE_MODEL_BYTES):
        assert 0.25 <= time.monotonic() - began < 4
    holder.join()

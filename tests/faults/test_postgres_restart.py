"""PostgreSQL goes down for longer than `heartbeat_stale_s` while a job runs, then comes back.

While it is down the API answers 503 problem+json with Retry-After; the worker keeps
training and retries its writes. When it is back the API answers again without a restart
(pool pre-ping), the job ends `succeeded` on its first attempt with its whole series, and a
job submitted during the outage's aftermath runs too.
"""

from __future__ import annotations

import time

import pytest

from .jobs import (
    LONG_RUN_STEPS,
    assert_complete,
    finished,
    long_run_spec,
    running_past,
    series,
    submit,
    training_spec,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.stack]

RUN_S = 30.0
OUTAGE_S = 5.0
PROBLEM = "application/problem+json"


def assert_unavailable(answer) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == PROBLEM and int(answer.headers["retry-after"]) >= 1
    assert answer.json()["status"] == 503


def test_a_database_restart_loses_nothing(fault_stack, fault_postgres):
    job_id = submit(fault_stack, long_run_spec(RUN_S, seed=3))
    wait_for(fault_stack, job_id, running_past(100), timeout_s=120)

    fault_postgres.stop()
    down_at = time.monotonic()
    client = fault_stack.client
    assert_unavailable(client.get(f"/v1/jobs/{job_id}"))
    assert_unavailable(client.get("/v1/jobs"))
    assert_unavailable(client.post("/v1/jobs", json=training_spec(10)))
    assert_unavailable(client.get("/readyz"))
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
    fault_postgres.start()

    deadline = time.monotonic() + 30
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the API did not recover by itself"
        time.sleep(0.1)
    done = wait_for(fault_stack, job_id, finished, timeout_s=180)
    assert (done["status"], done["attempts"]) == ("succeeded", 1), done["error"]
    assert done["summary"]["outcome"] == "time_budget"
    assert_complete(series(fault_stack, job_id), LONG_RUN_STEPS, done["summary"]["steps"])

    after = submit(fault_stack, training_spec(20, seed=4))
    assert wait_for(fault_stack, after, finished, timeout_s=60)["status"] == "succeeded"

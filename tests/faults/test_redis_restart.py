"""Redis crashes and comes back empty while one job runs and others wait in its queue.

Recovery path: the running job carries on (its heartbeat and metrics go to SQL, not Redis);
the worker's consumer reconnects to the new Redis; the API's reaper sees queued jobs older
than `heartbeat_stale_s` and a broker holding fewer messages than that, and publishes
them again. Every job ends `succeeded`, each on its first attempt.
"""

from __future__ import annotations

import pytest

from .jobs import (
    LONG_RUN_STEPS,
    assert_complete,
    finished,
    job,
    long_run_spec,
    running_past,
    series,
    submit,
    training_spec,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.stack]

RUN_S = 20.0
WAITING = 4


def test_jobs_queued_and_running_survive_a_redis_crash(fault_stack, fault_redis):
    running = submit(fault_stack, long_run_spec(RUN_S, seed=1))
    waiting = [submit(fault_stack, training_spec(20, seed=seed)) for seed in range(WAITING)]
    wait_for(fault_stack, running, running_past(100), timeout_s=120)
    before = {job_id: job(fault_stack, job_id) for job_id in waiting}
    assert {current["status"] for current in before.values()} == {"queued"}

    fault_redis.kill()
    fault_redis.start()
    assert fault_redis.answers()

    outcomes = {job_id: wait_for(fault_stack, job_id, finished, timeout_s=180) for job_id in [running, *waiting]}
    assert {job_id: (o["status"], o["attempts"]) for job_id, o in outcomes.items()} == {
        job_id: ("succeeded", 1) for job_id in outcomes
    }
    assert outcomes[running]["summary"]["outcome"] == "time_budget"
    assert_complete(series(fault_stack, running), LONG_RUN_STEPS, outcomes[running]["summary"]["steps"])
    for job_id in waiting:
        assert outcomes[job_id]["enqueued_at"] > before[job_id]["enqueued_at"], "the reaper published it again"
        assert series(fault_stack, job_id)["loss"]["step"] == list(range(21))

    after = submit(fault_stack, training_spec(20, seed=9))
    assert wait_for(fault_stack, after, finished, timeout_s=60)["status"] == "succeeded", "the worker consumes again"

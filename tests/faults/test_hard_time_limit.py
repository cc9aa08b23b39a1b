"""A job stuck where Python cannot raise the soft time limit (here: its pool process is
stopped with SIGSTOP, as if inside one long native call) is killed by the hard limit
`job_time_limit_grace_s` later; the job is `failed` with a reason naming both limits on its
first attempt, is not run again as a lost worker's job, and the worker serves the next job
from a fresh pool process.

The heartbeat goes stale while the process is stopped, so the reaper's staleness window
is set above limit + grace: a job stuck in native code keeps its heartbeat thread alive.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from .jobs import finished, running_past, submit, training_spec, wait_for
from .test_job_limits import pool_processes

pytestmark = [pytest.mark.slow, pytest.mark.stack]

TIME_LIMIT_S, GRACE_S = 8, 3  # the job reaches step 1 well before the soft limit, even on a loaded machine
STACK_SETTINGS = {
    "NTKLAB_JOB_TIME_LIMIT_S": str(TIME_LIMIT_S),
    "NTKLAB_JOB_TIME_LIMIT_GRACE_S": str(GRACE_S),
    "NTKLAB_HEARTBEAT_STALE_S": "60",
}


def test_a_job_killed_by_the_hard_limit_fails_once_with_the_reason(fault_stack):
    [stuck_process] = pool_processes(fault_stack.workers[0])
    job_id = submit(fault_stack, training_spec(200_000, seed=7, time_budget_s=300))
    wait_for(fault_stack, job_id, running_past(1), timeout_s=60)
    os.kill(stuck_process, signal.SIGSTOP)
    try:
        done = wait_for(fault_stack, job_id, finished, timeout_s=TIME_LIMIT_S + GRACE_S + 30)
    finally:
        if stuck_process in pool_processes(fault_stack.workers[0]):
            os.kill(stuck_process, signal.SIGCONT)
    assert (done["status"], done["attempts"], done["error"]["type"]) == ("failed", 1, "TimeLimit"), done["error"]
    assert f"time limit of {TIME_LIMIT_S} s exceeded" in done["error"]["message"]
    assert f"did not stop within {GRACE_S} s more" in done["error"]["message"]

    after = wait_for(fault_stack, submit(fault_stack, training_spec(20, seed=8)), finished, timeout_s=60)
    assert after["status"] == "succeeded", after["error"]
    assert stuck_process not in pool_processes(fault_stack.workers[0]), "a fresh pool process served it"
    time.sleep(1.0)
    assert wait_for(fault_stack, job_id, finished, timeout_s=1)["attempts"] == 1, "not run again"

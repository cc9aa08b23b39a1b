"""A job past its time limit, and a job that runs out of memory: each fails with the reason, and the
same worker process runs the next job.

Out of memory: the spec asks for the tangent kernel of 1024 probe points × 256 outputs, a
float32 matrix of (1024·256)² · 4 bytes = 256 GiB, with the kernel-size cap raised to let it in. The
pool process also gets an address-space limit (RLIMIT_AS, its current size + 2 GiB), so the
allocation is refused on any machine, whatever its RAM or overcommit policy.
"""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from .jobs import finished, running_past, submit, training_spec, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.stack]

TIME_LIMIT_S = 4
PROBE, OUTPUTS = 1024, 256
KERNEL_BYTES = (PROBE * OUTPUTS) ** 2 * 4
STACK_SETTINGS = {
    "NTKLAB_JOB_TIME_LIMIT_S": str(TIME_LIMIT_S),
    "NTKLAB_MAX_KERNEL_ENTRIES": str((PROBE * OUTPUTS) ** 2),
    # let the 256 GiB kernel past the estimate's caps and the worker's check, to the allocator
    "NTKLAB_MAX_JOB_MEMORY_BYTES": str(2**50),
    "NTKLAB_MAX_JOB_FLOPS": "1e30",
    "NTKLAB_MAX_JOB_SECONDS": "1e30",
    "NTKLAB_WORKER_MEMORY_BUDGET_BYTES": str(2**50),
}
HEADROOM_BYTES = 2 * 2**30

HUGE_KERNEL = {
    "name": "oom",
    "seed": 0,
    "model": {"hidden": [1]},
    "data": {"kind": "gaussian_mixture", "n_train": PROBE, "input_dim": 2, "classes": OUTPUTS, "probe": {"n": PROBE}},
    "training": {"max_steps": 1, "target_loss": None, "lr": 0.1},
    "diagnostics": {
        "kernel": {"schedule": "every", "every": 1},
        "hessian": None,
        "layer_sensitivity": False,
        "save_kernels": [],
        "save_weights": False,
    },
}


def pool_processes(worker) -> list[int]:
    children = Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split()
    return [int(pid) for pid in children]


def limit_address_space(pid: int) -> None:
    size_kb = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmSize:")
    )
    limit = size_kb * 1024 + HEADROOM_BYTES
    resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))


def assert_next_job_runs_on(stack, pool: list[int]) -> None:
    after = wait_for(stack, submit(stack, training_spec(20, seed=5)), finished, timeout_s=60)
    assert after["status"] == "succeeded", after["error"]
    assert pool_processes(stack.workers[0]) == pool, "the same pool process served it"


def test_a_job_over_its_time_limit_fails_naming_the_limit(fault_stack):
    pool = pool_processes(fault_stack.workers[0])
    job_id = submit(fault_stack, training_spec(200_000, seed=6, hidden=512, time_budget_s=30 * TIME_LIMIT_S))
    wait_for(fault_stack, job_id, running_past(1), timeout_s=60)
    done = wait_for(fault_stack, job_id, finished, timeout_s=TIME_LIMIT_S + 30)
    assert done["status"] == "failed" and done["error"]["type"] == "TimeLimit"
    assert f"time limit of {TIME_LIMIT_S} s" in done["error"]["message"]
    assert 0 < done["progress"]["step"] < 200_000
    assert_next_job_runs_on(fault_stack, pool)


def test_out_of_memory_fails_with_the_size_and_the_worker_serves_the_next_job(fault_stack):
    pool = pool_processes(fault_stack.workers[0])
    limit_address_space(pool[0])
    done = wait_for(fault_stack, submit(fault_stack, HUGE_KERNEL), finished, timeout_s=60)
    assert done["status"] == "failed" and done["error"]["type"] == "OutOfMemory", done["error"]
    assert done["error"]["message"].startswith("out of memory")
    assert str(KERNEL_BYTES) in done["error"]["message"]
    assert_next_job_runs_on(fault_stack, pool)

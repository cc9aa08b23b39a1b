"""Memory at the worker, through a real API and a real `celery worker` on PostgreSQL + Redis.

The worker runs with a budget of 1 GiB (worker_memory_budget_bytes) and a limit of 256 MiB
past its pool process's size once torch is imported (worker_memory_limit_bytes, RLIMIT_DATA),
so both paths are real on any machine and nothing reaches the kernel's OOM killer:

- a job estimated at ≈ 1.5 GiB (20 000 × 5 000 float64 data, made twice over) is over the
  budget: it fails at once, on attempt 1, with the estimate and the budget, without running;
- a job estimated at ≈ 0.75 GiB (10 000 × 5 000) is within the budget, so it starts; its first
  400 MB array is past the limit, so numpy raises MemoryError: it fails on attempt 1 as
  out_of_memory with the size that failed, and the same pool process then runs the next job.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ntklab.workers.tasks import requested_bytes
from tests.conftest import LiveStack, served

pytestmark = [pytest.mark.slow, pytest.mark.stack]

BUDGET = 2**30
LIMIT = 256 * 2**20
QUIET = {
    "kernel": None,
    "hessian": None,
    "layer_sensitivity": False,
    "linearization_error": False,
    "save_kernels": [],
    "save_weights": False,
}


def data_job(n: int, d: int) -> dict:
    return {
        "model": {"hidden": [4]},
        "data": {"kind": "gaussian_mixture", "n_train": n, "input_dim": d},
        "training": {"max_steps": 1},
        "diagnostics": QUIET,
    }


SMALL = {
    "model": {"hidden": [16]},
    "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4},
    "training": {"max_steps": 20, "target_loss": None, "lr": 0.1},
}


@pytest.fixture(scope="module")
def stack(postgres_redis_stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    settings = postgres_redis_stack | {
        "NTKLAB_WORKER_MEMORY_BUDGET_BYTES": str(BUDGET),
        "NTKLAB_WORKER_MEMORY_LIMIT_BYTES": str(LIMIT),
    }
    with served(settings, tmp_path_factory.mktemp("oom-logs")) as live:
        yield live


def submit(stack: LiveStack, spec: dict) -> dict:
    answer = stack.client.post("/v1/jobs", json=spec)
    assert answer.status_code == 202, answer.text
    return answer.json()


def finished(stack: LiveStack, job_id: str, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while (job := stack.client.get(f"/v1/jobs/{job_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"job {job_id} still {job['status']} after {timeout_s} s"
        time.sleep(0.05)
    return job


def pool_processes(stack: LiveStack) -> list[int]:
    pid = stack.workers[0].pid
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_job_over_the_workers_budget_fails_at_once_with_the_numbers(stack):
    created = submit(stack, data_job(20_000, 5_000))
    estimate = created["estimate"]["memory_bytes"]
    assert BUDGET < estimate < 8 * 2**30, "past the worker's budget, within the service's cap"
    job = finished(stack, created["id"], timeout_s=30)
    assert job["status"] == "failed" and job["attempts"] == 1
    error = job["error"]
    assert error["code"] == "exceeds_device_memory" and error["type"] == "ExceedsDeviceMemory"
    assert error["estimate_bytes"] == estimate and error["device_bytes"] == BUDGET
    assert f"({estimate} bytes)" in error["message"] and f"({BUDGET} bytes)" in error["message"]
    assert "worker_memory_budget_bytes" in error["message"] and "the largest term is data" in error["message"]
    assert job["progress"]["step"] == 0 and job["summary"] is None


def test_a_job_that_runs_out_of_memory_fails_on_its_first_attempt_and_the_worker_goes_on(stack):
    pool = pool_processes(stack)
    n, d = 10_000, 5_000
    created = submit(stack, data_job(n, d))
    assert created["estimate"]["memory_bytes"] < BUDGET, "the worker's check lets it start"
    job = finished(stack, created["id"])
    assert job["status"] == "failed" and job["attempts"] == 1, job
    error = job["error"]
    assert error["code"] == "out_of_memory" and error["type"] == "OutOfMemory", error
    # numpy names the array it could not make: n × d float64, rounded to a tenth of a MiB
    assert error["requested_bytes"] == pytest.approx(8 * n * d, rel=0.01), error
    assert error["message"].startswith("out of memory")
    after = finished(stack, submit(stack, SMALL)["id"])
    assert after["status"] == "succeeded" and after["attempts"] == 1, after["error"]
    assert pool_processes(stack) == pool, "the same pool process served the next job"


@pytest.mark.parametrize(
    ("message", "size"),
    [
        ("DefaultCPUAllocator: not enough memory: you tried to allocate 274877906944 bytes.", 274877906944),
        ("CUDA out of memory. Tried to allocate 40.00 GiB (GPU 0; 79.10 GiB total capacity)", 40 * 2**30),
        ("Unable to allocate 381. MiB for an array with shape (10000, 5000) and data type float64", 381 * 2**20),
        ("out of memory", None),
    ],
)
def test_the_size_that_failed_is_read_from_each_allocators_message(message, size):
    assert requested_bytes(message) == size

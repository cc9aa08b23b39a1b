"""A real worker process: it warms up with a tiny job before it is ready, its torch threads follow
NTKLAB_WORKER_THREADS, and a job's timings include storing it."""

from __future__ import annotations

import datetime as dt
import os
import re

import pytest

from ntklab.config.settings import Settings
from ntklab.serve import worker_env
from ntklab.workers.threads import cores_per_worker, owned_cores, worker_threads
from tests.conftest import LiveStack
from tests.faults.jobs import finished, submit, wait_for

JOB = {
    "seed": 0,
    "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4, "classes": 2, "probe": {"n": 8}},
    "model": {"hidden": [32], "output_activation": "swish"},
    "training": {"max_steps": 100, "target_loss": None},
    "diagnostics": {"kernel": {"points": 8}, "hessian": {"probe_points": 2}},
    "device": "cpu",
}


@pytest.fixture(scope="module")
def sqlite_stack(sqlite_stack: dict[str, str]) -> dict[str, str]:
    """tests/conftest.py's embedded stack, its worker on one torch thread (what `live_stack` starts here)."""
    return sqlite_stack | {"NTKLAB_WORKER_THREADS": "1"}


@pytest.mark.parametrize("live_stack", ["sqlite+filesystem"], indirect=True)
def test_the_worker_runs_torch_on_the_threads_it_was_given_and_times_storing(live_stack: LiveStack):
    assert "1 torch threads" in (live_stack.logs / "worker0.log").read_text()
    job = wait_for(live_stack, submit(live_stack, JOB), finished, timeout_s=120)
    assert job["status"] == "succeeded", job["error"]
    summary = job["summary"]
    assert summary["threads"] == 1
    timings, wall = summary["timings"], summary["wall_time_s"]
    assert timings["storage"] > 0 and timings["hessian"] > 0 and timings["training"] > 0
    assert sum(timings.values()) == pytest.approx(wall, rel=0.05)
    ran = dt.datetime.fromisoformat(job["finished_at"]) - dt.datetime.fromisoformat(job["started_at"])
    assert wall <= ran.total_seconds() + 0.5  # finished_at is stamped before the outcome is written


@pytest.mark.parametrize("live_stack", ["sqlite+filesystem"], indirect=True)
def test_the_worker_runs_a_tiny_job_at_start_before_it_says_it_is_ready(live_stack: LiveStack):
    """The warm-up (engine/run.py) ran in the pool process and succeeded: the ready line says so."""
    ready = re.search(
        r"worker process ready: engine imported and (.*?), device cpu", (live_stack.logs / "worker0.log").read_text()
    )
    assert ready is not None and re.fullmatch(r"warmed up by a tiny job in \d+\.\d\d s", ready[1]), ready


def test_the_setting_wins_then_omp_num_threads_then_the_cores_owned(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert worker_threads(3) == 3
    assert worker_threads(0) == owned_cores() <= len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert worker_threads(0) == 1 and worker_threads(5) == 5


def test_ntklab_up_shares_the_cores_among_its_workers():
    cores = owned_cores()
    for workers in (1, 2, cores + 1):
        env = worker_env(Settings(worker_threads=0), workers)
        assert env["NTKLAB_WORKER_THREADS"] == str(max(1, cores // workers)) == str(cores_per_worker(workers))
    assert worker_env(Settings(worker_threads=7), 2)["NTKLAB_WORKER_THREADS"] == "7"

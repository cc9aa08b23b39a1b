"""POST → poll → result through a real API and a real `celery worker`, on both stacks.

Each stack (PostgreSQL + Redis, SQLite + filesystem broker) gets one API and one worker
for the whole module; the SIGKILL test starts a second worker after killing the first.
"""

from __future__ import annotations

import io
import math
import signal
import time

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.stack]

TINY = {
    "name": "e2e-tiny",
    "tags": ["e2e"],
    "seed": 0,
    "model": {"hidden": [32]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 3, "classes": 2, "probe": {"n": 4}},
    "training": {"max_steps": 30, "target_loss": None, "lr": 0.1},
    "diagnostics": {
        "kernel": {"schedule": "every", "every": 5},
        "hessian": {"at": ["init", "final"], "top_k": 1, "probe_points": 1, "iterations": 8},
    },
}
N_PROBE, OUTPUTS = 4, 2


def long_spec(steps: int, seed: int = 1, time_budget_s: float | None = None) -> dict:
    """GD on 16 points, the kernel every 100 steps: about 0.2 ms a step on a laptop core."""
    return {
        "name": f"e2e-long-{steps}",
        "seed": seed,
        "model": {"hidden": [64]},
        "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4, "classes": 2, "probe": {"n": 4}},
        "training": {"max_steps": steps, "target_loss": None, "lr": 0.05, "time_budget_s": time_budget_s},
        "diagnostics": {
            "kernel": {"schedule": "every", "every": 100},
            "hessian": None,
            "layer_sensitivity": False,
            "save_kernels": [],
            "save_weights": False,
        },
    }


def submit(stack, spec: dict) -> str:
    answer = stack.client.post("/v1/jobs", json=spec)
    assert answer.status_code == 202, answer.text
    assert answer.headers["Location"].endswith(answer.json()["id"])
    return answer.json()["id"]


def job(stack, job_id: str) -> dict:
    answer = stack.client.get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def wait_for(stack, job_id: str, done, timeout_s: float, every_s: float = 0.05) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = job(stack, job_id)
        if done(current):
            return current
        time.sleep(every_s)
    pytest.fail(f"job {job_id} after {timeout_s} s: {current['status']} {current['progress']} {current['error']}")


def finished(current: dict) -> bool:
    return current["status"] in ("succeeded", "failed", "cancelled")


def metrics(stack, job_id: str) -> dict:
    answer = stack.client.get(f"/v1/jobs/{job_id}/metrics")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_tiny_job_runs_to_the_end_with_its_metrics_and_artifacts(live_stack):
    job_id = submit(live_stack, TINY)
    done = wait_for(live_stack, job_id, finished, timeout_s=120)
    assert done["status"] == "succeeded", done["error"]
    assert done["attempts"] == 1 and done["device"] == "cpu" and done["progress"]["step"] == 30
    summary = done["summary"]
    for name in (
        "final_loss",
        "delta_k_max",
        "kernel_lambda_min_init",
        "kernel_cond_final",
        "hessian_norm_init",
        "grad_norm_init",
        "weight_change_l2",
        "weight_change_linf",
        "linearization_error_final",
        "wall_time_s",
    ):
        assert isinstance(summary[name], float) and math.isfinite(summary[name]), name
    assert summary["steps"] == 30

    series = metrics(live_stack, job_id)
    assert series["loss"]["step"] == list(range(31))
    assert series["delta_k"]["step"] == list(range(0, 31, 5))
    assert all(math.isfinite(v) for v in series["loss"]["value"])

    listed = live_stack.client.get(f"/v1/jobs/{job_id}/artifacts").json()["data"]
    assert {"kernel_init.npy", "kernel_final.npy"} <= {a["name"] for a in listed}
    download = live_stack.client.get(f"/v1/jobs/{job_id}/artifacts/kernel_init.npy")
    assert download.status_code == 200
    kernel = np.load(io.BytesIO(download.content))
    assert kernel.shape == (N_PROBE * OUTPUTS, N_PROBE * OUTPUTS)
    assert np.allclose(kernel, kernel.T) and np.linalg.eigvalsh(kernel).min() > -1e-6


def test_cancel_stops_a_running_job_within_seconds(live_stack):
    job_id = submit(live_stack, long_spec(200_000, time_budget_s=120))
    wait_for(live_stack, job_id, lambda j: j["status"] == "running" and j["progress"]["step"] > 0, timeout_s=60)
    asked = time.monotonic()
    assert live_stack.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    done = wait_for(live_stack, job_id, finished, timeout_s=10)
    assert done["status"] == "cancelled" and time.monotonic() - asked < 5
    assert 0 < done["progress"]["step"] < 200_000
    assert metrics(live_stack, job_id)["loss"]["step"][0] == 0


def test_a_job_enqueued_twice_runs_once(live_stack):
    from ntklab.config.settings import Settings
    from ntklab.workers.celery_app import make_celery
    from ntklab.workers.queue import Broker

    job_id = submit(live_stack, TINY)
    settings = {k.removeprefix("NTKLAB_").lower(): v for k, v in live_stack.settings.items()}
    Broker(make_celery(Settings(**settings))).enqueue(job_id)
    done = wait_for(live_stack, job_id, finished, timeout_s=60)
    assert done["status"] == "succeeded" and done["attempts"] == 1
    time.sleep(1.0)
    assert job(live_stack, job_id) == done
    assert metrics(live_stack, job_id)["loss"]["step"] == list(range(31))


def test_a_killed_worker_loses_nothing(live_stack):
    """SIGKILL the worker's process group mid-job; the reaper requeues it and a new worker finishes it.

    A fixed step count (the retried and the clean run must match step for step), long
    enough (0.8 s at a laptop core's 0.2 ms a step, four of the stack's 0.2 s progress ticks) that
    a fast machine cannot finish it between the tick the test sees past steps // 20 and the kill;
    10 000 steps (~30 s a run on the 2-core CI machine) showed nothing more and made this the
    slowest integration test."""
    steps = 4_000
    job_id = submit(live_stack, long_spec(steps, seed=2))
    wait_for(
        live_stack, job_id, lambda j: j["status"] == "running" and j["progress"]["step"] >= steps // 20, timeout_s=120
    )
    assert len(metrics(live_stack, job_id).get("loss", {"step": []})["step"]) > 0
    live_stack.kill(live_stack.workers[-1], signal.SIGKILL)
    killed_at = job(live_stack, job_id)
    assert killed_at["status"] == "running" and killed_at["progress"]["step"] < steps

    live_stack.start_worker()
    retried = wait_for(live_stack, job_id, finished, timeout_s=180)
    assert retried["status"] == "succeeded", retried["error"]
    assert retried["attempts"] == 2

    clean_id = submit(live_stack, long_spec(steps, seed=2))
    clean = wait_for(live_stack, clean_id, finished, timeout_s=180)
    assert clean["attempts"] == 1
    retried_series, clean_series = metrics(live_stack, job_id), metrics(live_stack, clean_id)
    assert retried_series.keys() == clean_series.keys()
    for name, points in clean_series.items():
        assert retried_series[name]["step"] == points["step"], name
        assert len(set(points["step"])) == len(points["step"]), name
        np.testing.assert_allclose(retried_series[name]["value"], points["value"], rtol=1e-5, err_msg=name)
    assert clean_series["loss"]["step"][-1] == steps

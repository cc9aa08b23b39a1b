"""Submit, poll and check jobs of a live stack."""

from __future__ import annotations

import time

import pytest

from ntklab.localstack import LocalStack



def submit(stack: LocalStack, spec: dict) -> str:
    answer = stack.client.post("/v1/jobs", json=spec)
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def job(stack: LocalStack, job_id: str) -> dict:
    answer = stack.client.get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def wait_for(stack: LocalStack, job_id: str, done, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    current = job(stack, job_id)
    while not done(current):
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} after {timeout_s} s: {current['status']} {current['progress']} {current['error']}")
        time.sleep(0.05)
        current = job(stack, job_id)
    return current


def finished(current: dict) -> bool:
    return current["status"] in ("succeeded", "failed", "cancelled")


def running_past(step: int):
    return lambda current: current["status"] == "running" and (current["progress"]["step"] or 0) >= step


def series(stack: LocalStack, job_id: str) -> dict:
    answer = stack.client.get(f"/v1/jobs/{job_id}/metrics")
    assert answer.status_code == 200, answer.text
    return answer.json()


def training_spec(steps: int, seed: int = 0, hidden: int = 64) -> dict:
    """Full-batch GD on 16 points for `steps` steps, the kernel every 100 steps, no Hessian."""
    return {
        "name": f"fault-{steps}", "seed": seed,
        "model": {"hidden": [hidden]},
        "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4, "classes": 2, "probe": {"n": 4}},
        "training": {"max_steps": steps, "target_loss": None, "lr": 0.05},
        "diagnostics": {
            "kernel": {"schedule": "every", "every": 100}, "hessian": None,
            "layer_sensitivity": False, "save_kernels": [], "save_weights": False,
        },
    }


def assert_complete(points: dict, steps: int) -> None:
    """Each scheduled step of the loss and of the kernel diagnostics exactly once, the last step included."""
    from workers.engine.schedule import loss_steps

    assert points["loss"]["step"] == sorted(loss_steps(steps) | {steps})
    assert points["delta_k"]["step"] == list(range(0, steps + 1, 100))

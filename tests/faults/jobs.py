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
            pytest.fail(
                f"job {job_id} after {timeout_s} s: {current['status']} {current['progress']} {current['error']}"
            )
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


LONG_RUN_STEPS = 200_000


def training_spec(steps: int, seed: int = 0, hidden: int = 64, time_budget_s: float | None = None) -> dict:
    """Full-batch GD on 16 points for `steps` steps (or `time_budget_s`), the kernel every 100 steps, no Hessian."""
    return {
        "name": f"fault-{steps}",
        "seed": seed,
        "model": {"hidden": [hidden]},
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


def long_run_spec(time_budget_s: float, seed: int) -> dict:
    """A job that trains for `time_budget_s` of wall time however fast the machine is, so a
    test can act while it runs (a fixed step count can finish before the first poll)."""
    return training_spec(LONG_RUN_STEPS, seed=seed, time_budget_s=time_budget_s)


def assert_complete(points: dict, max_steps: int, last_step: int | None = None) -> None:
    """Each scheduled step up to the last one reached, of the loss and of the kernel
    diagnostics, exactly once, the last step included (default: the run reached max_steps)."""
    from ntklab.engine.training.schedule import loss_steps

    last = max_steps if last_step is None else last_step
    assert points["loss"]["step"] == sorted({s for s in loss_steps(max_steps) if s <= last} | {last})
    assert points["delta_k"]["step"] == sorted(set(range(0, last + 1, 100)) | {last})

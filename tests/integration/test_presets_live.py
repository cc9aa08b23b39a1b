"""A preset end to end through the real API and a real worker; cancelling a sweep mid-run."""

from __future__ import annotations

import time

import pytest

from ntklab.service.grid import grid_size
from ntklab.service.presets import PRESETS

pytestmark = [pytest.mark.slow, pytest.mark.stack]


def wait_sweep(stack, sweep_id: str, done, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sweep = stack.client.get(f"/v1/sweeps/{sweep_id}").json()
        if done(sweep):
            return sweep
        time.sleep(0.2)
    pytest.fail(f"sweep {sweep_id} after {timeout_s} s: {sweep['status']} {sweep['counts']}")


def test_fig1_width_smoke_preset_runs_and_fits(live_stack):
    answer = live_stack.client.post("/v1/presets/fig1-width", json={"scale": "smoke"})
    assert answer.status_code == 202, answer.text
    sweep = wait_sweep(live_stack, answer.json()["id"], lambda s: s["status"] not in ("queued", "running"), 300)
    assert sweep["status"] == "succeeded", sweep["counts"]
    assert sweep["total"] == grid_size(PRESETS["fig1-width"].sweep("smoke").grid)
    fits = {fit["group"]["model.output_activation"]: fit for fit in sweep["fits"]}
    assert set(fits) == {"identity", "softmax", "swish"}
    assert all(row["summary"]["delta_k_max"] is not None for row in sweep["table"])
    assert fits["identity"]["slope"] < 0 < fits["identity"]["points"][0]["y_mean"]
    largest = {head: fit["points"][-1]["y_mean"] for head, fit in fits.items()}
    assert largest["softmax"] > 10 * largest["identity"] and largest["swish"] > 10 * largest["identity"]
    plot = live_stack.client.get(f"/v1/sweeps/{sweep['id']}/plot")
    assert plot.status_code == 200 and plot.content[:4] == b"\x89PNG"


def test_cancelling_a_sweep_stops_its_running_job_and_drops_the_queued_ones(live_stack):
    sweep_spec = {
        "base": {
            "model": {"hidden": [64]},
            "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4},
            "training": {"max_steps": 200_000, "target_loss": None, "lr": 0.01, "time_budget_s": 120},
            "diagnostics": {"kernel": {"schedule": "every", "every": 1000}, "hessian": None},
        },
        "grid": {"seed": [0, 1, 2, 3]},
    }
    created = live_stack.client.post("/v1/sweeps", json=sweep_spec).json()
    wait_sweep(live_stack, created["id"], lambda s: s["counts"]["running"] == 1, 60)
    assert live_stack.client.post(f"/v1/sweeps/{created['id']}/cancel").status_code == 202
    done = wait_sweep(live_stack, created["id"], lambda s: s["status"] not in ("queued", "running"), 15)
    assert done["status"] == "cancelled" and done["counts"]["cancelled"] == 4

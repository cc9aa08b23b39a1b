"""A sweep over inline data end to end: the jobs store only their patches, and a real worker on each stack
claims them, reads each full spec (the sweep's base + the job's patch) and runs it."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.stack]

X = [[i / 8, ((i * 3) % 8) / 8] for i in range(8)]
Y = [float(i % 2) for i in range(8)]


def test_a_real_worker_runs_every_job_of_an_inline_sweep(live_stack):
    sweep = {
        "name": "inline-live",
        "base": {
            "data": {"kind": "inline", "x": X, "y": Y},
            "model": {"hidden": [16]},
            "training": {"max_steps": 20},
            "diagnostics": {"hessian": None},
        },
        "grid": {"model.hidden.0": [16, 64], "seed": [0, 1]},
        "fits": [{"y": "final_loss", "x": "model.hidden.0"}],
    }
    created = live_stack.client.post("/v1/sweeps", json=sweep)
    assert created.status_code == 202, created.text
    deadline = time.monotonic() + 120
    while (done := live_stack.client.get(f"/v1/sweeps/{created.json()['id']}").json())["status"] in (
        "queued",
        "running",
    ):
        assert time.monotonic() < deadline, done["counts"]
        time.sleep(0.2)
    assert done["status"] == "succeeded", done["counts"]
    assert all(row["summary"]["steps"] > 0 for row in done["table"])
    assert [point["runs"] for point in done["fits"][0]["points"]] == [2, 2]
    job = live_stack.client.get(f"/v1/jobs/{done['table'][3]['job_id']}").json()
    assert (job["spec"]["data"]["x"], job["spec"]["model"]["hidden"], job["spec"]["seed"]) == (X, [64], 1)

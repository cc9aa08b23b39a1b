"""A job's warnings through the real stack: submitted over HTTP, run by the worker's task body (claim, engine,
store) on SQLite and PostgreSQL, read back through the API and the SDK; a sweep's fit carries its points'."""

from __future__ import annotations

from sqlalchemy import select

from ntklab.client import Client
from ntklab.store import models
from ntklab.store.job_store import JobStore
from ntklab.workers.tasks import execute

SMALL = {
    "model": {"hidden": [8], "output_activation": "sigmoid", "bias": False},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 3, "targets": "signed"},
    "training": {"max_steps": 3, "target_loss": 1e-9},
    "diagnostics": {"kernel": {"points": 2}, "hessian": None, "save_kernels": []},
}


def run_queued(app, settings, job_id: str) -> None:
    """What a worker does with the job: claim the row, run the engine, store the outcome."""
    store = JobStore(app.state.sessions)
    execute(store, store.claim(job_id, worker="w0", device="cpu"), settings, "cpu")


def test_the_job_resource_and_the_sdk_carry_the_runs_warnings(client, app, settings):
    job_id = client.post("/v1/jobs", json=SMALL).json()["id"]
    assert client.get(f"/v1/jobs/{job_id}").json()["warnings"] == []
    run_queued(app, settings, job_id)

    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "succeeded"
    assert {w["code"] for w in job["warnings"]} == {"target_loss_not_reached", "head_cannot_reach_targets"}
    assert "warnings" not in job["summary"], "shown once, as the job's own field"
    reached = next(w for w in job["warnings"] if w["code"] == "target_loss_not_reached")
    assert reached["values"]["steps"] == 3 and reached["values"]["final_loss"] == job["summary"]["final_loss"]
    listed = client.get("/v1/jobs").json()["data"]
    assert [w["code"] for w in listed[0]["warnings"]] == [w["code"] for w in job["warnings"]]

    sdk = Client(base_url="http://testserver", http_client=client, max_retries=0)
    warnings = sdk.jobs.retrieve(job_id).warnings
    assert [(w.code, w.values) for w in warnings] == [(w["code"], w["values"]) for w in job["warnings"]]


def test_a_clean_run_has_no_warnings(client, app, settings):
    clean = {
        **SMALL,
        "model": {"hidden": [8], "bias": False},
        "data": {**SMALL["data"], "targets": "onehot"},
        "training": {"max_steps": 3, "target_loss": None},
    }
    job_id = client.post("/v1/jobs", json=clean).json()["id"]
    run_queued(app, settings, job_id)
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "succeeded" and job["warnings"] == []


def test_a_sweeps_fit_and_rows_carry_the_warnings_of_its_points(client, app, settings):
    sweep = client.post(
        "/v1/sweeps",
        json={
            "base": {**SMALL, "model": {"hidden": [8], "bias": False}, "data": {**SMALL["data"], "targets": "onehot"}},
            "grid": {"model.hidden.0": [4, 8, 16]},
            "fits": [{"y": "weight_change_l2", "x": "model.hidden.0"}],
        },
    ).json()
    job_ids = [row["job_id"] for row in client.get(f"/v1/sweeps/{sweep['id']}").json()["table"]]
    for job_id in job_ids:
        run_queued(app, settings, job_id)

    done = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert all([w["code"] for w in row["warnings"]] == ["target_loss_not_reached"] for row in done["table"])
    assert all("warnings" not in row["summary"] for row in done["table"])
    (fit,) = done["fits"]
    (warning,) = fit["warnings"]
    assert warning["code"] == "target_loss_not_reached"
    assert warning["values"] == {"points": 3, "of": 3, "job_ids": job_ids}
    assert warning["message"].startswith("3 of 3 points: training stopped at max_steps")


def test_the_warnings_are_stored_in_their_own_column_not_in_the_summary(client, app, settings):
    job_id = client.post("/v1/jobs", json=SMALL).json()["id"]
    run_queued(app, settings, job_id)
    with app.state.sessions() as session:
        row = session.scalar(select(models.Job).where(models.Job.id == job_id))
        assert {w["code"] for w in row.warnings} == {"target_loss_not_reached", "head_cannot_reach_targets"}
        assert "warnings" not in row.summary

"""A sweep is stored once, on SQLite and PostgreSQL: its base on the sweep row, each job only where it differs,
and every reader (GET /v1/jobs/{id}, the worker's claim, the upload-in-use check, a downgrade) sees full specs.
Also: the max_sweep_bytes cap, the paged table, and the status of a sweep left with no jobs."""

from __future__ import annotations

import numpy as np
import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from ntklab.api_schemas.spec import JobSpec
from ntklab.service.app import create_app
from ntklab.store.db import make_engine
from ntklab.store.job_store import JobStore
from ntklab.store.models import Job, Sweep
from tests.service.conftest import make_settings
from tests.upload_files import npz
from tests.worker_writes import written_by_a_worker

INLINE = {"kind": "inline", "x": [[i / 4, (i % 3) / 2] for i in range(24)], "y": [float(i % 2) for i in range(24)]}
WIDTHS, SEEDS = (8, 16), (0, 1, 2)
SWEEP = {
    "name": "inline",
    "tags": ["t"],
    "base": {"data": INLINE, "model": {"hidden": [8]}, "training": {"max_steps": 3}},
    "grid": {"model.hidden.0": list(WIDTHS), "seed": list(SEEDS)},
    "fits": [{"y": "delta_k_max", "x": "model.hidden.0"}],
}
POINTS = [(width, seed) for width in WIDTHS for seed in SEEDS]


def full_spec(width: int, seed: int) -> dict:
    """The job spec of one grid point, written out independently of the sweep code."""
    spec = {"tags": ["t"], "seed": seed, "data": INLINE, "model": {"hidden": [width]}, "training": {"max_steps": 3}}
    return JobSpec.model_validate(spec).model_dump(mode="json")


def job_ids(client, sweep_id: str) -> list[str]:
    return [row["job_id"] for row in client.get(f"/v1/sweeps/{sweep_id}").json()["table"]]


def test_the_base_is_stored_once_and_each_job_only_where_it_differs(client, db):
    sweep = client.post("/v1/sweeps", json=SWEEP).json()
    stored = db.scalar(select(Sweep.spec).where(Sweep.id == sweep["id"]))
    assert stored["base"]["data"] == JobSpec.model_validate({"data": INLINE}).model_dump(mode="json")["data"]
    rows = db.execute(select(Job.spec, Job.spec_patch).where(Job.sweep_id == sweep["id"]).order_by(Job.seq)).all()
    assert [spec for spec, _ in rows] == [None] * len(POINTS)
    assert [patch for _, patch in rows] == [
        {**({"seed": seed} if seed else {}), **({"model.hidden": [width]} if width != 8 else {}), "model.output_dim": 1}
        for width, seed in POINTS
    ]


def test_a_grid_over_a_data_field_still_stores_the_arrays_once(client, db):
    sweep = client.post("/v1/sweeps", json={**SWEEP, "grid": {"data.standardize": [False, True]}}).json()
    patches = db.scalars(select(Job.spec_patch).where(Job.sweep_id == sweep["id"]).order_by(Job.seq)).all()
    assert patches == [{"model.output_dim": 1}, {"data.standardize": True, "model.output_dim": 1}]
    standardized = client.get(f"/v1/jobs/{sweep['table'][1]['job_id']}").json()["spec"]
    assert standardized == {**full_spec(8, 0), "data": {**full_spec(8, 0)["data"], "standardize": True}}


def test_every_reader_sees_each_jobs_full_spec(client, app):
    sweep = client.post("/v1/sweeps", json=SWEEP).json()
    ids = [row["job_id"] for row in sweep["table"]]
    for job_id, (width, seed) in zip(ids, POINTS):
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["spec"] == full_spec(width, seed) and job["tags"] == ["t"] and job["sweep_id"] == sweep["id"]
    store = JobStore(app.state.sessions)
    claim = store.claim(ids[4], worker="w1", device="cpu")
    assert claim.spec == full_spec(*POINTS[4])
    seen = []  # the fair next job: the sweep's largest still queued, ties in grid order (width 16, seed 0)
    fair = store.claim_next(ids[0], worker="w1", device_for=lambda spec: seen.append(spec) or "cpu")
    assert fair.job_id == ids[3] and fair.spec == seen[0] == full_spec(*POINTS[3])


def test_a_sweep_over_the_byte_cap_is_a_422_naming_the_limit_and_stores_nothing(client_with, db):
    names = {**SWEEP, "grid": {"name": [letter * 200 for letter in "abcdef"]}}
    tiny = client_with(max_sweep_bytes=100).post("/v1/sweeps", json=names)
    assert tiny.status_code == 422 and tiny.headers["content-type"] == "application/problem+json"
    (error,) = tiny.json()["errors"]
    assert (error["field"], error["limit"]) == ("base", 100) and error["value"] > 100
    assert "max_sweep_bytes" in tiny.json()["detail"]
    document_bytes = error["value"]
    one_name = client_with(max_sweep_bytes=document_bytes + 250).post("/v1/sweeps", json=names)
    assert one_name.status_code == 422, one_name.text
    (error,) = one_name.json()["errors"]
    assert (error["field"], error["limit"]) == ("grid", document_bytes + 250) and error["value"] > document_bytes + 400
    assert db.scalar(select(Sweep.id)) is None and db.scalar(select(Job.id)) is None
    assert client_with(max_sweep_bytes=document_bytes + 6 * 250).post("/v1/sweeps", json=names).status_code == 202


def test_the_table_is_paged_in_grid_order_while_counts_and_fits_cover_every_job(client, db):
    sweep = client.post("/v1/sweeps", json=SWEEP).json()
    ids = [row["job_id"] for row in sweep["table"]]
    for job_id, (width, _seed) in zip(ids, POINTS):
        written_by_a_worker(db, job_id, status="succeeded", summary={"delta_k_max": width**-0.5})
    first = client.get(f"/v1/sweeps/{sweep['id']}", params={"limit": 4}).json()
    second = client.get(f"/v1/sweeps/{sweep['id']}", params={"limit": 4, "after": first["next"]}).json()
    assert (len(first["table"]), first["has_more"], len(second["table"]), second["has_more"], second["next"]) == (
        4,
        True,
        2,
        False,
        None,
    )
    assert [row["job_id"] for row in first["table"] + second["table"]] == ids
    assert [row["values"] for row in second["table"]] == [
        {"model.hidden.0": 16, "seed": 1},
        {"model.hidden.0": 16, "seed": 2},
    ]
    for page in (first, second):
        assert page["total"] == 6 and page["counts"]["succeeded"] == 6 and page["status"] == "succeeded"
        (fit,) = page["fits"]
        assert fit["slope"] == pytest.approx(-0.5) and [point["runs"] for point in fit["points"]] == [3, 3]
    whole = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert len(whole["table"]) == 6 and whole["has_more"] is False and whole["next"] is None


@pytest.mark.parametrize(
    ("params", "field", "status"), [({"limit": 201}, "limit", 422), ({"after": "not-a-cursor"}, "after", 400)]
)
def test_bad_paging_parameters_are_a_4xx_naming_them(client, params, field, status):
    sweep = client.post("/v1/sweeps", json=SWEEP).json()
    answer = client.get(f"/v1/sweeps/{sweep['id']}", params=params)
    assert answer.status_code == status and answer.json()["errors"][0]["field"] == field


def test_a_sweep_left_with_no_jobs_is_cancelled_not_succeeded(client):
    sweep = client.post("/v1/sweeps", json=SWEEP).json()
    assert client.post(f"/v1/sweeps/{sweep['id']}/cancel").json()["counts"]["cancelled"] == 6
    for job_id in job_ids(client, sweep["id"]):
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
    emptied = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert (emptied["total"], emptied["table"], emptied["status"]) == (0, [], "cancelled")


def test_a_data_set_a_queued_sweep_job_uses_cannot_be_deleted(client):
    rng = np.random.default_rng(0)
    dataset = client.post(
        "/v1/datasets",
        content=npz(x=rng.normal(size=(12, 3)), y=rng.normal(size=12)),
        headers={"Content-Type": "application/octet-stream"},
    ).json()
    base = {"model": {"hidden": [8]}, "data": {"kind": "dataset", "id": dataset["id"]}, "training": {"max_steps": 3}}
    sweep = client.post("/v1/sweeps", json={"base": base, "grid": {"data.n_train": [4, 12]}}).json()
    refused = client.delete(f"/v1/datasets/{dataset['id']}")
    assert refused.status_code == 409, refused.text
    assert sweep["table"][0]["job_id"] in refused.json()["detail"]
    client.post(f"/v1/sweeps/{sweep['id']}/cancel")
    assert client.delete(f"/v1/datasets/{dataset['id']}").status_code == 204


@pytest.mark.parametrize("fresh_database", ["sqlite", "postgresql"], indirect=True)
def test_downgrading_writes_each_sweep_jobs_full_spec_back(fresh_database, alembic_for, tmp_path):
    _, url = fresh_database
    command.upgrade(alembic_for(url), "head")
    with TestClient(create_app(make_settings(url, tmp_path))) as client:
        sweep = client.post("/v1/sweeps", json=SWEEP).json()
    command.downgrade(alembic_for(url), "0004")
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            specs = (
                connection.execute(text("SELECT spec FROM jobs WHERE sweep_id = :id ORDER BY seq"), {"id": sweep["id"]})
                .scalars()
                .all()
            )
    finally:
        engine.dispose()
    assert [
        JobSpec.model_validate_json(spec) if isinstance(spec, str) else JobSpec.model_validate(spec) for spec in specs
    ] == [JobSpec.model_validate(full_spec(width, seed)) for width, seed in POINTS]
    command.upgrade(alembic_for(url), "head")

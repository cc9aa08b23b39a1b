"""Liveness, readiness, a database that is down, Prometheus metrics, OpenAPI examples, the reaper in the lifespan."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select, update

from ntklab.config.settings import Settings
from ntklab.service.app import create_app
from ntklab.store.models import Job, utcnow

SMALL = {"model": {"hidden": [8]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}}
UNREACHABLE = {
    "sqlite": "sqlite:///{tmp}/no-such-folder/ntklab.db",
    "postgresql": "postgresql+psycopg://ntklab:ntklab@127.0.0.1:9/ntklab",
}


def test_healthz_and_readyz(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready", "database": "ok", "broker": "ok"}


@pytest.fixture(params=sorted(UNREACHABLE))
def client_without_database(request, tmp_path):
    settings = Settings(
        database_url=UNREACHABLE[request.param].format(tmp=tmp_path),
        broker_dir=tmp_path / "broker",
        reaper_enabled=False,
    )
    with TestClient(create_app(settings), raise_server_exceptions=True) as client:
        yield client


def test_a_database_that_is_down_makes_readyz_and_the_api_answer_503(client_without_database):
    client = client_without_database
    assert client.get("/healthz").status_code == 200
    for answer, kind in [
        (client.get("/readyz"), "not-ready"),
        (client.get("/v1/jobs"), "database-unavailable"),
        (client.post("/v1/jobs", json=SMALL), "database-unavailable"),
    ]:
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["type"] == f"urn:ntklab:problem:{kind}"
        assert int(answer.headers["retry-after"]) >= 1
        assert "psycopg" not in answer.text and "sqlite" not in answer.text


def samples(client) -> dict[tuple[str, tuple], float]:
    answer = client.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def test_metrics_count_jobs_by_status_queue_depth_and_latency_by_route(client, db):
    ids = [client.post("/v1/jobs", json=SMALL).json()["id"] for _ in range(3)]
    db.execute(update(Job).where(Job.id == ids[0]).values(status="running"))
    db.commit()
    client.post(f"/v1/jobs/{ids[1]}/cancel")
    for job_id in ids:
        client.get(f"/v1/jobs/{job_id}")
    client.get("/v1/jobs/job_missing")

    seen = samples(client)
    jobs = {dict(labels)["status"]: value for (name, labels), value in seen.items() if name == "ntklab_jobs"}
    assert jobs == {"queued": 1, "running": 1, "succeeded": 0, "failed": 0, "cancelled": 1}
    assert seen[("ntklab_queue_depth", ())] == 3
    count = "ntklab_http_request_duration_seconds_count"
    route = "/v1/jobs/{job_id}"
    assert seen[(count, (("method", "GET"), ("route", route), ("status", "200")))] == 3
    assert seen[(count, (("method", "GET"), ("route", route), ("status", "404")))] == 1
    assert seen[(count, (("method", "POST"), ("route", "/v1/jobs"), ("status", "202")))] == 3


def test_openapi_documents_every_body_with_examples_that_are_accepted(client):
    assert client.get("/docs").status_code == 200
    schema = client.get("/openapi.json").json()
    bodies = [
        (path, operation["requestBody"])
        for path, operations in schema["paths"].items()
        for operation in operations.values()
        if "requestBody" in operation
    ]
    assert "/v1/jobs" in [path for path, _ in bodies]
    uploads = {"/v1/datasets", "/v1/models"}
    for path, body in bodies:
        if path in uploads:  # file uploads: a raw body or multipart parts, streamed to disk
            assert set(body["content"]) == {"application/octet-stream", "multipart/form-data"}, path
        else:
            assert body["content"]["application/json"].get("examples"), f"{path} has no request example"
    assert uploads <= {path for path, _ in bodies}
    job_examples = dict(bodies)["/v1/jobs"]["content"]["application/json"]["examples"]
    assert len(job_examples) >= 3
    for name, example in job_examples.items():
        answer = client.post("/v1/jobs", json=example["value"])
        assert answer.status_code == 202, (name, answer.text)


# Short enough that an enabled reaper judges heartbeats within a second (its first passes judge
# nothing until the database has been reachable for heartbeat_stale_s), so that a disabled one
# waiting out REAPER_WINDOW_S, several times that, shows it really stayed off.
FAST_REAPER = {"heartbeat_stale_s": 0.5, "reaper_interval_s": 0.1}
REAPER_WINDOW_S = 4.0


def status_after_a_stale_heartbeat(client, db) -> tuple[str, float]:
    """Mark a fresh job `running` with a heartbeat an hour old; poll until the reaper moves it or
    REAPER_WINDOW_S passes. Returns its status and the seconds waited."""
    job_id = client.post("/v1/jobs", json=SMALL).json()["id"]
    stale = utcnow() - dt.timedelta(seconds=3600)
    db.execute(update(Job).where(Job.id == job_id).values(status="running", attempts=1, heartbeat_at=stale))
    db.commit()
    started = time.monotonic()
    while time.monotonic() - started < REAPER_WINDOW_S:
        db.expire_all()
        if db.scalar(select(Job.status).where(Job.id == job_id)) != "running":
            break
        time.sleep(0.05)
    db.expire_all()
    return db.scalar(select(Job.status).where(Job.id == job_id)), time.monotonic() - started


def test_the_lifespan_runs_the_reaper_when_enabled(client_with, db):
    """The control for the test below: the same job, settings and window, reaper on → requeued in time."""
    client = client_with(reaper_enabled=True, **FAST_REAPER)
    broker = client.app.state.broker
    assert broker.depth() == 0
    status, waited = status_after_a_stale_heartbeat(client, db)
    assert status == "queued", f"the enabled reaper did not requeue the job within {REAPER_WINDOW_S} s"
    assert waited < REAPER_WINDOW_S / 2, f"requeued only after {waited:.1f} s: the window below proves too little"
    assert broker.depth() == 2, "the requeued job was published again"


def test_the_reaper_stays_off_when_disabled(client_with, db):
    client = client_with(reaper_enabled=False, **FAST_REAPER)
    broker = client.app.state.broker
    status, waited = status_after_a_stale_heartbeat(client, db)
    assert status == "running", "a reaper ran although reaper_enabled is false"
    assert waited >= REAPER_WINDOW_S
    assert broker.depth() == 1, "nothing published the job again"

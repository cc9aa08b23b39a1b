"""Incremental metric reads: GET /v1/jobs/{id}/metrics?since_step=N and GET /v1/jobs/{id}/updates.

The chunks are written the way a worker writes them (ntklab.workers.heartbeat.SeriesBuffer flushed through
JobStore.report, several series per step, flushes falling anywhere, even between two series of one step).
The reference is always the full series read without since_step.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from ntklab.store import api_keys
from tests.worker_writes import claimed_by_a_worker

SMALL = {"model": {"hidden": [8]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}}
# Series recorded at each step, in the order the engine records them; delta_k only every 5th step.
SERIES_AT = {"loss": 1, "delta_k": 5, "weight_change_l2": 1}


def recorded(steps: range):
    """(name, step, value) in recording order: every series due at a step, step by step."""
    for step in steps:
        for name, every in SERIES_AT.items():
            if step % every == 0:
                yield name, step, (None if step == 7 and name == "loss" else 1.0 / (1 + step) + len(name))


def running_job(client, app):
    """A job claimed by a worker, and flush(points): one heartbeat's write of those points, as the reporter writes it."""
    job_id = client.post("/v1/jobs", json=SMALL).json()["id"]
    return job_id, claimed_by_a_worker(app, job_id)


def after(series: dict, step: int) -> dict:
    """The points of each series with a greater step; a series without any left out."""
    kept = {}
    for name, points in series.items():
        pairs = [(s, v) for s, v in zip(points["step"], points["value"]) if s > step]
        if pairs:
            kept[name] = {"step": [s for s, _ in pairs], "value": [v for _, v in pairs]}
    return kept


def test_since_step_returns_exactly_the_later_points(client, app):
    job_id, flush = running_job(client, app)
    points = list(recorded(range(40)))
    for start in range(0, len(points), 17):  # 17 points a flush: flushes split steps
        flush(points[start : start + 17])
    full = client.get(f"/v1/jobs/{job_id}/metrics").json()
    assert sum(len(s["step"]) for s in full.values()) == len(points)
    for since in (0, 1, 6, 7, 20, 34, 35, 38, 39, 1000):
        answer = client.get(f"/v1/jobs/{job_id}/metrics", params={"since_step": since})
        assert answer.status_code == 200
        assert answer.json() == after(full, since), since
    some = client.get(f"/v1/jobs/{job_id}/metrics", params={"since_step": 30, "names": "delta_k"}).json()
    assert some == {"delta_k": {"step": [35], "value": [1.0 / 36 + len("delta_k")]}}


def test_a_page_that_polls_updates_ends_with_every_point(client, app):
    """The dashboard's loop (views/job.js): hold the series, ask for the points after (last step held − 1),
    append the ones with a step past each series' last; after every flush it holds what a full read gives."""
    job_id, flush = running_job(client, app)
    held: dict[str, dict] = {}
    points = list(recorded(range(80)))  # 176 points
    cuts = [0, 1, 4, 5, 13, 14, 30, 31, 32, 80, 81, 150, len(points)]  # flushes ending inside a step, too
    for lo, hi in zip(cuts, cuts[1:]):
        flush(points[lo:hi])
        last = max((s["step"][-1] for s in held.values() if s["step"]), default=-1)
        params = {"since_step": last - 1} if last >= 1 else {}
        update = client.get(f"/v1/jobs/{job_id}/updates", params=params).json()
        assert update["object"] == "job_update" and update["since_step"] == params.get("since_step")
        assert update["job"]["status"] == "running" and update["job"]["progress"]["step"] == points[hi - 1][1]
        assert update["job"]["spec"] is None
        for name, series in update["metrics"].items():
            mine = held.setdefault(name, {"step": [], "value": []})
            for step, value in zip(series["step"], series["value"]):
                if not mine["step"] or step > mine["step"][-1]:
                    mine["step"].append(step)
                    mine["value"].append(value)
        assert held == client.get(f"/v1/jobs/{job_id}/metrics").json(), (lo, hi)


def test_updates_show_the_job_as_retrieve_does_without_its_spec(client, app):
    job_id, flush = running_job(client, app)
    flush(list(recorded(range(3))))
    retrieved = client.get(f"/v1/jobs/{job_id}").json()
    update = client.get(f"/v1/jobs/{job_id}/updates").json()
    assert update["job"] == retrieved | {"spec": None, "estimate": None}
    assert update["metrics"] == client.get(f"/v1/jobs/{job_id}/metrics").json()


@pytest.mark.parametrize("path", ["metrics", "updates"])
@pytest.mark.parametrize("since", ["-1", "2147483648", "x"])
def test_a_bad_since_step_is_a_422_naming_it(client, app, path, since):
    job_id, _ = running_job(client, app)
    answer = client.get(f"/v1/jobs/{job_id}/{path}", params={"since_step": since})
    assert answer.status_code == 422
    assert "since_step" in answer.text


def test_updates_of_someone_elses_job_are_a_404(client_with):
    authed = client_with(auth="on")
    with authed.app.state.sessions() as session:
        alice, bob = (api_keys.create_key(session, name).secret for name in ("alice", "bob"))
    job = authed.post("/v1/jobs", json=SMALL, headers={"X-API-Key": alice}).json()
    assert authed.get(f"/v1/jobs/{job['id']}/updates", headers={"X-API-Key": alice}).status_code == 200
    answer = authed.get(f"/v1/jobs/{job['id']}/updates", headers={"X-API-Key": bob})
    assert answer.status_code == 404 and answer.json()["detail"] == "no such job"


def test_the_index_on_job_id_and_last_step_serves_a_since_step_read(client, app):
    """PostgreSQL's plan for the repository's since_step query, with sequential scans off, uses the index."""
    job_id, flush = running_job(client, app)
    flush(list(recorded(range(10))))
    with app.state.sessions() as session:
        if session.bind.dialect.name != "postgresql":
            pytest.skip("the plan is PostgreSQL's")
        session.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(
            session.execute(
                text(
                    "EXPLAIN SELECT name, steps, values FROM metric_chunks WHERE job_id = :job AND last_step > :since"
                ),
                {"job": job_id, "since": 5},
            ).scalars()
        )
        stored = session.execute(text("SELECT count(*) FROM metric_chunks WHERE last_step IS NULL")).scalar()
    assert "ix_metric_chunks_job_id_last_step" in plan, plan
    assert stored == 0, "the writer fills in last_step"

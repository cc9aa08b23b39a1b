"""Idempotency-Key on POST /v1/sweeps and POST /v1/presets/{name}, on SQLite and PostgreSQL:
same key + same body → the first sweep again, same key + other body → 422, concurrent duplicates → one sweep."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select

from ntklab.service.grid import grid_size
from ntklab.service.presets import PRESETS
from ntklab.store.models import Job, Sweep

SWEEP = {
    "name": "keyed",
    "base": {"model": {"hidden": [8]}, "training": {"max_steps": 5}},
    "grid": {"model.hidden.0": [8, 16], "seed": [0, 1, 2, 3]},
}
REUSED = "urn:ntklab:problem:idempotency-key-reused"


def stored(db) -> tuple[int, int]:
    """(sweeps, jobs) in the database."""
    db.rollback()
    return db.scalar(select(func.count()).select_from(Sweep)), db.scalar(select(func.count()).select_from(Job))


def post(client, body: dict, key: str, path: str = "/v1/sweeps"):
    return client.post(path, json=body, headers={"Idempotency-Key": key})


def test_same_key_and_same_body_replays_the_first_sweep(client, db):
    first = post(client, SWEEP, "s-1")
    spelled_out = {
        "grid": SWEEP["grid"],
        "base": {"training": {"max_steps": 5, "optimizer": "gd"}, "model": {"hidden": [8], "bias": True}},
        "name": "keyed",
    }
    second = client.post(
        "/v1/sweeps",
        content=json.dumps(spelled_out, indent=1),
        headers={"Idempotency-Key": "s-1", "content-type": "application/json"},
    )
    assert first.status_code == second.status_code == 202, second.text
    assert "idempotent-replayed" not in first.headers
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json()["id"] == first.json()["id"] and second.headers["location"] == first.headers["location"]
    assert [row["job_id"] for row in second.json()["table"]] == [row["job_id"] for row in first.json()["table"]]
    assert stored(db) == (1, 8)
    assert post(client, SWEEP, "s-2").json()["id"] != first.json()["id"]
    assert stored(db) == (2, 16)


def test_same_key_with_another_body_is_a_422_naming_the_header(client, db):
    first = post(client, SWEEP, "s-1").json()
    answer = post(client, {**SWEEP, "grid": {**SWEEP["grid"], "seed": [0, 1, 2, 4]}}, "s-1")
    assert answer.status_code == 422 and answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["type"] == REUSED and problem["errors"][0]["field"] == "Idempotency-Key"
    assert first["id"] in problem["detail"]
    assert stored(db) == (1, 8)


def test_twenty_concurrent_duplicates_store_one_sweep(client, db):
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda _: post(client, SWEEP, "race"), range(20)))
    assert {answer.status_code for answer in answers} == {202}, {
        answer.text for answer in answers if answer.status_code != 202
    }
    assert len({answer.json()["id"] for answer in answers}) == 1
    assert sum(answer.headers.get("idempotent-replayed") == "true" for answer in answers) == 19
    assert stored(db) == (1, 8)


def test_concurrent_duplicates_are_replayed_even_when_the_first_sweep_fills_the_quota(client_with, db):
    """A duplicate that missed the key before the first committed then meets a full quota: it answers the first sweep."""
    client = client_with(max_queued_jobs_per_key=8)
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda _: post(client, SWEEP, "full"), range(20)))
    assert {answer.status_code for answer in answers} == {202}, {
        answer.text for answer in answers if answer.status_code != 202
    }
    assert len({answer.json()["id"] for answer in answers}) == 1
    assert stored(db) == (1, 8)
    assert post(client, SWEEP, "other").status_code == 429


def test_presets_honour_the_key(client, db):
    jobs = grid_size(PRESETS["table1-hessian"].sweep("smoke").grid)
    first = post(client, {"scale": "smoke"}, "p-1", "/v1/presets/table1-hessian")
    second = post(client, {"scale": "smoke"}, "p-1", "/v1/presets/table1-hessian")
    assert first.status_code == second.status_code == 202
    assert second.json()["id"] == first.json()["id"] and second.headers["idempotent-replayed"] == "true"
    assert stored(db) == (1, jobs)
    other_scale = post(client, {"scale": "cpu"}, "p-1", "/v1/presets/table1-hessian")
    assert other_scale.status_code == 422 and other_scale.json()["type"] == REUSED
    other_preset = post(client, {"scale": "smoke"}, "p-1", "/v1/presets/fig1-width")
    assert other_preset.status_code == 422 and other_preset.json()["type"] == REUSED
    assert stored(db) == (1, jobs)


def test_a_key_over_200_characters_is_a_422(client, db):
    answer = post(client, SWEEP, "k" * 201)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "Idempotency-Key"
    assert answer.json()["errors"][0]["limit"] == 200
    assert stored(db) == (0, 0)

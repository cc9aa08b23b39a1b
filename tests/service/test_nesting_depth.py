"""Nested residuals through the API, on both databases: MAX_NESTING deep is stored and answered (POST, GET,
the listing, a sweep), one level deeper is a 422 naming model.layers and the limit, with nothing stored or queued.

Before the limit, graphs 126–250 deep were stored and queued and then answered 500 (pydantic's
serialisation depth), for good on every GET.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from ntklab.api_schemas.graph import MAX_NESTING
from ntklab.store.models import Job
from tests.engine.test_graph_nesting import nested

PROBLEM = "application/problem+json"
DATA = {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4, "classes": 2, "probe": {"n": 2}}


def job(depth: int) -> dict:
    return {"model": {"kind": "graph", "layers": nested(depth)}, "data": DATA, "training": {"max_steps": 2}}


def test_a_graph_max_nesting_deep_is_stored_and_every_answer_serialises(client, app):
    created = client.post("/v1/jobs", json=job(MAX_NESTING))
    assert created.status_code == 202, created.text
    retrieved = client.get(f"/v1/jobs/{created.json()['id']}")
    assert retrieved.status_code == 200, retrieved.text
    assert retrieved.text.count('"type":"residual"') == MAX_NESTING
    assert client.get("/v1/jobs").status_code == 200
    assert app.state.broker.depth() == 1


def job_text(depth: int) -> str:
    """job(depth) as JSON text, written without recursion (json.dumps would hit the recursion limit)."""
    layers = '[{"type":"dense","width":4}]'
    layers = '[{"type":"residual","layers":' * depth + layers + "}]" * depth
    return json.dumps(job(0)).replace(json.dumps(nested(0)), layers)


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 126, 250, 450])
def test_deeper_is_a_422_naming_the_field_and_the_limit_with_nothing_stored(client, app, db, depth):
    refused = client.post("/v1/jobs", content=job_text(depth), headers={"content-type": "application/json"})
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == PROBLEM
    (error,) = refused.json()["errors"]
    assert error["field"] == "model.layers" and error["limit"] == MAX_NESTING
    assert f"nest at most {MAX_NESTING} deep" in error["message"]
    assert db.scalar(select(func.count()).select_from(Job)) == 0
    assert app.state.broker.depth() == 0


def test_a_sweep_on_a_base_max_nesting_deep_is_answered_and_one_deeper_is_refused(client, db):
    sweep = {"base": job(MAX_NESTING), "grid": {"seed": [0, 1]}}
    created = client.post("/v1/sweeps", json=sweep)
    assert created.status_code == 202, created.text
    assert client.get(f"/v1/sweeps/{created.json()['id']}").status_code == 200
    refused = client.post("/v1/sweeps", json={"base": job(MAX_NESTING + 1), "grid": {"seed": [0, 1]}})
    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["errors"]
    assert error["field"] == "model.layers" and f"nest at most {MAX_NESTING} deep" in error["message"], error
    assert db.scalar(select(func.count()).select_from(Job)) == 2

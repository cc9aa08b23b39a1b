"""POST /v1/jobs?dry_run=true on both backends: the estimate a job would carry, at this deployment's rates,
with the submission's validation and caps, and nothing stored, queued, held against the quota or an
Idempotency-Key."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from ntklab.api_schemas.problems import RESOURCE_CAP
from ntklab.planner.estimate import FLOPS_PER_S, SECONDS_PER_OP
from ntklab.store.models import Job
from tests.upload_files import mlp_onnx

SPEC = {
    "data": {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 8, "classes": 3},
    "model": {"hidden": [128]},
    "training": {"max_steps": 300},
}
SUBMITTED = ("memory_bytes", "flops", "memory", "work", "seconds", "time", "phases", "rates")


def test_the_dry_run_answers_the_estimate_the_job_then_carries(client_with):
    client = client_with(estimate_flops_per_s=1e9, estimate_seconds_per_op=2e-5)
    dry = client.post("/v1/jobs", params={"dry_run": "true"}, json=SPEC)
    assert dry.status_code == 200, dry.text
    assert "Location" not in dry.headers
    answer = dry.json()
    created = client.post("/v1/jobs", json=SPEC)
    assert created.status_code == 202, created.text
    stored = client.get(f"/v1/jobs/{created.json()['id']}").json()
    assert stored["estimate"] == {name: answer[name] for name in SUBMITTED}
    assert answer["parameters"] == stored["parameters"] == 8 * 128 + 128 + 128 * 3 + 3
    assert answer["rates"]["flops_per_s"] == 1e9 and answer["rates"]["seconds_per_op"] == 2e-5
    assert answer["rates"]["source"] == "settings"


def test_the_phases_sum_to_the_seconds_at_the_rates(client):
    answer = client.post("/v1/jobs?dry_run=true", json=SPEC).json()
    assert answer["rates"] == {
        "flops_per_s": FLOPS_PER_S,
        "seconds_per_op": SECONDS_PER_OP,
        "source": "default",
        "detail": answer["rates"]["detail"],
    }
    assert "bench/bench_time_estimate.py" in answer["rates"]["detail"]
    phases = answer["phases"]
    assert {phase["name"] for phase in phases} == set(answer["time"]) == set(answer["work"])
    assert [phase["seconds"] for phase in phases] == sorted((phase["seconds"] for phase in phases), reverse=True)
    assert sum(phase["seconds"] for phase in phases) == pytest.approx(answer["seconds"])
    training = next(phase for phase in phases if phase["name"] == "training")
    assert training["flops"] == answer["work"]["training"]
    expected = training["flops"] / FLOPS_PER_S + training["operations"] * SECONDS_PER_OP
    assert training["seconds"] == pytest.approx(expected) and "FLOPs at" in training["what"]
    hessian = next(phase for phase in phases if phase["name"] == "hessian")
    assert hessian["seconds"] == pytest.approx(
        hessian["flops"] / (FLOPS_PER_S / 8) + hessian["operations"] * SECONDS_PER_OP
    )


def test_the_caps_it_was_checked_against(client, settings):
    answer = client.post("/v1/jobs?dry_run=true", json=SPEC).json()
    caps = {cap["setting"]: cap for cap in answer["caps"]}
    assert caps["max_job_memory_bytes"] == {
        "setting": "max_job_memory_bytes",
        "limit": settings.max_job_memory_bytes,
        "value": answer["memory_bytes"],
    }
    assert (
        caps["max_job_flops"]["limit"] == settings.max_job_flops and caps["max_job_flops"]["value"] == answer["flops"]
    )
    assert caps["max_job_seconds"]["value"] == answer["seconds"] <= caps["max_job_seconds"]["limit"]


def test_a_dry_run_stores_and_queues_nothing(client, app, db):
    assert client.post("/v1/jobs?dry_run=true", json=SPEC).status_code == 200
    assert db.scalar(select(func.count()).select_from(Job)) == 0
    assert app.state.broker.depth() == 0
    assert client.get("/v1/jobs").json()["data"] == []
    assert client.post("/v1/jobs", json=SPEC).status_code == 202
    assert app.state.broker.depth() == 1, "the broker counts a submission's message"


def test_an_over_cap_spec_is_the_submissions_422(client_with):
    client = client_with(max_job_flops=1e12, max_steps=100_000)
    spec = {"training": {"max_steps": 200_000}, "model": {"hidden": [100_000]}}
    submitted = client.post("/v1/jobs", json=spec)
    dry = client.post("/v1/jobs?dry_run=true", json=spec)
    assert dry.status_code == submitted.status_code == 422, dry.text
    assert dry.headers["content-type"] == submitted.headers["content-type"] == "application/problem+json"
    assert dry.json() == submitted.json()
    assert dry.json()["type"] == RESOURCE_CAP
    steps, work = dry.json()["errors"]
    assert steps["field"] == work["field"] == "training.max_steps" and work["message"].startswith("estimated work")
    within = client.post("/v1/jobs?dry_run=true", json={"training": {"max_steps": 100_000}})
    assert within.status_code == 200 and within.json()["caps"][1]["value"] <= 1e12, within.text


def test_an_invalid_spec_is_the_submissions_422(client):
    spec = {"model": {"hidden": [0]}, "extra": 1}
    submitted, dry = client.post("/v1/jobs", json=spec), client.post("/v1/jobs?dry_run=true", json=spec)
    assert dry.status_code == submitted.status_code == 422
    assert dry.json() == submitted.json()
    unknown = {"model": {"kind": "onnx", "id": "mdl_missing"}}
    dry = client.post("/v1/jobs?dry_run=true", json=unknown)
    assert dry.status_code == 422 and dry.json() == client.post("/v1/jobs", json=unknown).json()
    assert client.post("/v1/jobs?dry_run=true", json={"model": {"hidden": [8]}}).status_code == 200


def test_an_onnx_model_is_estimated_from_its_stored_profile(client):
    model_id = client.post(
        "/v1/models", content=mlp_onnx(), headers={"Content-Type": "application/octet-stream"}
    ).json()["id"]
    n = 8
    spec = {
        "model": {"kind": "onnx", "id": model_id},
        "data": {"kind": "gaussian_mixture", "n_train": n, "input_dim": 3, "classes": 2},
    }
    answer = client.post("/v1/jobs?dry_run=true", json=spec)
    assert answer.status_code == 200, answer.text
    estimate = answer.json()
    # x [3] → Gemm → h [8] → Tanh → a [8] → Gemm → y [2]: 18 saved activations, 88 counted FLOPs, 3·8 + 8 + 8·2 + 2 weights
    assert estimate["memory"]["activations"] == 4 * (n * 18 + 2 * n * 9)
    assert estimate["work"]["training"] == 5000 * 3 * n * (88 + 18)
    assert estimate["parameters"] == 3 * 8 + 8 + 8 * 2 + 2
    created = client.post("/v1/jobs", json=spec).json()
    assert created["estimate"]["memory"] == estimate["memory"] and created["estimate"]["seconds"] == estimate["seconds"]


def test_neither_the_idempotency_key_nor_the_quota_is_consulted(client_with):
    client = client_with(max_queued_jobs_per_key=1)
    key = {"Idempotency-Key": "dry-then-real"}
    assert client.post("/v1/jobs?dry_run=true", json={**SPEC, "seed": 1}, headers=key).status_code == 200
    created = client.post("/v1/jobs", json=SPEC, headers=key)
    assert created.status_code == 202 and "Idempotent-Replayed" not in created.headers, created.text
    assert client.post("/v1/jobs", json={**SPEC, "seed": 2}).status_code == 429, "the quota is full"
    dry = client.post("/v1/jobs?dry_run=true", json={**SPEC, "seed": 2}, headers=key)
    assert dry.status_code == 200, dry.text

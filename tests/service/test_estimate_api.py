"""The memory and work estimate at submission, on both backends: hostile specs are a 422 naming the
largest term, accepted jobs carry `estimate`, and graphs and ONNX models are covered.

The five hostile specs are those of issue #10, each accepted (202) before the estimate and then
left to allocate on a worker: 74.5 GiB of float64 data, a 2·10⁶-wide layer over 10⁵ points,
a 60 000-channel convolution, a 500-vector Lanczos basis of 2.2 M weights, 64 layers of 880.
Expected terms are worked out in each comment from the formulas of planner/estimate.py.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from ntklab.api_schemas.problems import RESOURCE_CAP
from ntklab.store.models import UploadedModel
from tests.upload_files import mlp_onnx

GIB = 2**30
HOSTILE = {
    # data: 10⁵ × (10⁵ + 2) values × 2·8 bytes ≈ 149 GiB; weights 10⁷ → 0.2 GiB
    "data": (
        "data",
        "data.n_train",
        {
            "model": {"hidden": [100]},
            "data": {"kind": "gaussian_mixture", "n_train": 100_000, "input_dim": 100_000},
        },
    ),
    # activations: 4 bytes · 10⁵ points · 2·10⁶ (saved tanh output + 2 layers in backward) ≈ 2.2 TiB
    "wide": (
        "activations",
        "model",
        {
            "model": {"hidden": [2_000_000]},
            "data": {"kind": "gaussian_mixture", "n_train": 100_000, "input_dim": 16},
        },
    ),
    # activations: 1797 digits × 60 000 channels × 64 pixels × 4 bytes × (2 + 2) ≈ 103 GiB
    "channels": (
        "activations",
        "model",
        {
            "model": {"kind": "cnn", "hidden": [60_000]},
            "data": {"kind": "builtin", "name": "digits", "n_train": 1797},
        },
    ),
    # lanczos: 8 bytes · 2.22 M weights · (500 + 2) vectors ≈ 8.3 GiB
    "lanczos": (
        "lanczos",
        "diagnostics.hessian.iterations",
        {
            "model": {"hidden": [1480, 1480]},
            "data": {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 16},
            "diagnostics": {"hessian": {"iterations": 500}},
        },
    ),
    # lanczos: 8 bytes · 48.9 M weights · (32 + 2) vectors ≈ 12.4 GiB
    "deep": (
        "lanczos",
        "diagnostics.hessian.iterations",
        {
            "model": {"hidden": [880] * 64},
            "data": {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 16},
        },
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_spec_is_refused_naming_the_largest_term(client, settings, name):
    term, field, spec = HOSTILE[name]
    answer = client.post("/v1/jobs", json=spec)
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"] == RESOURCE_CAP
    memory = [error for error in problem["errors"] if error["message"].startswith("estimated peak memory")]
    assert len(memory) == 1, problem
    error = memory[0]
    assert error["field"] == field
    assert f"the largest term is {term}," in error["message"]
    assert error["limit"] == settings.max_job_memory_bytes == 8 * GIB and error["value"] > error["limit"]
    assert "max_job_memory_bytes" in error["message"] and f"({error['value']} bytes)" in error["message"]
    assert client.get("/v1/jobs").json()["data"] == []


def test_the_infinite_width_maps_of_a_pooled_conv_net_are_refused(client, settings):
    # [64, 64, 1024, 1024] float64 moments of 32×32 images: 34.4 GB each, K and Θ alive in every map (each
    # written over its input, planner/limit_cost.py): 8 · 64² · 2 · 1024² bytes = 64 GiB
    spec = {
        "data": {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 3 * 32 * 32, "probe": {"n": 64}},
        "model": {"kind": "cnn", "hidden": [16, 16], "input_shape": [3, 32, 32], "readout": "global_avg"},
        "diagnostics": {"infinite_width": {}},
    }
    answer = client.post("/v1/jobs", json=spec)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.json()
    assert problem["type"] == RESOURCE_CAP
    (error,) = [error for error in problem["errors"] if error["message"].startswith("estimated peak memory")]
    assert error["field"] == "diagnostics.infinite_width"
    assert "the largest term is infinite_width, 64.1 GiB" in error["message"]
    assert error["limit"] == settings.max_job_memory_bytes and error["value"] >= 8 * 64**2 * 2 * 1024**2
    without = {**spec, "diagnostics": {}}
    assert client.post("/v1/jobs", json=without).status_code == 202


def test_work_over_its_cap_names_the_training_steps(client_with):
    client = client_with(max_job_flops=1e12)
    # 200 000 steps × 3 · 64 points · (2·(16·1000 + 1000·2) + 1002) FLOPs ≈ 1.4·10¹²
    answer = client.post("/v1/jobs", json={"training": {"max_steps": 200_000}})
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["errors"]
    assert error["field"] == "training.max_steps" and "the largest term is training," in error["message"]
    assert error["limit"] == 10**12 and error["value"] > 10**12
    assert client.post("/v1/jobs", json={"training": {"max_steps": 20_000}}).status_code == 202


def deep_graph(residuals: int, inner: int) -> list[dict]:
    body = [
        layer for _ in range(inner) for layer in ({"type": "dense", "width": 4}, {"type": "activation", "name": "tanh"})
    ]
    return [{"type": "residual", "layers": body} for _ in range(residuals)]


def test_time_over_its_cap_names_the_steps_of_a_deep_graph(client_with):
    # 63 residuals × 32 (dense 4, tanh) pairs: D = 63·(32·(7 + 2) + 2) + 7 = 18 277 operations per forward pass, a
    # step 3·D + 2·4034 weight tensors + 20 = 62 919 of them, 20 000 steps ≈ 1.26·10⁹ operations ≈ 6 200 s at the
    # default 4.9 µs; its FLOPs are negligible
    client = client_with(max_job_seconds=3600)
    spec = {
        "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4},
        "model": {"kind": "graph", "layers": deep_graph(63, 32)},
        "training": {"max_steps": 20_000},
        "diagnostics": {"hessian": None},
    }
    answer = client.post("/v1/jobs", json=spec)
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"] == RESOURCE_CAP
    (error,) = problem["errors"]
    assert error["field"] == "training.max_steps" and "the largest term is training," in error["message"]
    assert "max_job_seconds" in error["message"] and error["message"].startswith("estimated time")
    training = 20_000 * (3 * 18_277 + 2 * 4034 + 20) * 4.9e-6
    assert error["limit"] == 3600 and training < error["value"] < 1.05 * training, (
        "the training term, and a little more"
    )
    short = client.post("/v1/jobs", json={**spec, "training": {"max_steps": 200}})
    assert short.status_code == 202, short.text
    assert 10 < short.json()["estimate"]["seconds"] < 3600


def test_the_time_rates_are_settings(client_with):
    spec = {"training": {"max_steps": 1000}}
    slow = client_with(max_job_seconds=1, estimate_flops_per_s=1e6).post("/v1/jobs", json=spec)
    assert slow.status_code == 422 and slow.json()["errors"][0]["message"].startswith("estimated time"), slow.text
    assert client_with(max_job_seconds=1000).post("/v1/jobs", json=spec).status_code == 202


def test_an_accepted_job_carries_its_estimate(client):
    n, d, O = 256, 20, 3
    spec = {
        "data": {"kind": "gaussian_mixture", "n_train": n, "input_dim": d, "classes": O},
        "model": {"hidden": [64]},
        "training": {"max_steps": 100},
    }
    created = client.post("/v1/jobs", json=spec)
    assert created.status_code == 202, created.text
    estimate = created.json()["estimate"]
    assert estimate["memory"]["data"] == 2 * 8 * n * (d + O)
    # one hidden tanh layer of 64 and the readout: a = 64 + 3 saved, the widest ℓ = 64
    assert estimate["memory"]["activations"] == 4 * (n * (64 + O) + 2 * n * 64)
    assert estimate["memory_bytes"] >= max(estimate["memory"].values())
    assert set(estimate["work"]) == {
        "training",
        "kernel",
        "hessian",
        "path",
        "constants",
        "infinite_width",
        "hessian_spectrum",
        "loss_hessian",
        "sensitivity",
        "kernel_trace",
    }
    assert set(estimate["time"]) == set(estimate["work"])
    assert estimate["seconds"] == pytest.approx(sum(estimate["time"].values())) and estimate["seconds"] > 0
    assert estimate["memory"]["constants"] == estimate["work"]["constants"] == 0, (
        "an ONNX model's folded constants only"
    )
    assert (
        estimate["memory"]["infinite_width"]
        == estimate["memory"]["spectrum"]
        == estimate["memory"]["loss_hessian"]
        == 0
    )
    assert (
        estimate["work"]["infinite_width"]
        == estimate["work"]["hessian_spectrum"]
        == estimate["work"]["loss_hessian"]
        == 0
    )
    assert estimate["flops"] == pytest.approx(sum(estimate["work"].values()))
    assert estimate["work"]["training"] > estimate["work"]["path"] > 0
    job_id = created.json()["id"]
    assert client.get(f"/v1/jobs/{job_id}").json()["estimate"] == estimate
    assert client.get("/v1/jobs").json()["data"][0]["estimate"] is None, "list pages leave it out, like the spec"


def test_a_graph_is_estimated_from_its_layer_plan(client):
    n = 32
    spec = {
        "data": {"kind": "gaussian_mixture", "n_train": n, "input_dim": 6, "classes": 2},
        "model": {
            "kind": "graph",
            "layers": [
                {"type": "dense", "width": 48},
                {"type": "activation", "name": "gelu"},
                {"type": "layer_norm"},
                {"type": "dense", "width": 16},
            ],
        },
    }
    estimate = client.post("/v1/jobs", json=spec).json()["estimate"]
    # saved per example: dense 48, gelu 48, layer norm 2·48, dense 16, readout 2; widest 48
    assert estimate["memory"]["activations"] == 4 * (n * (48 + 48 + 96 + 16 + 2) + 2 * n * 48)
    # weights: 6·48 + 48 + 2·48 + 48·16 + 16 + 16·2 + 2 = 1250, kept, as w₀ and gradient, and in two .npz
    assert estimate["memory"]["weights"] == 4 * (1250 * 3 + 1250 * 2)


def test_an_onnx_model_is_estimated_from_what_its_upload_counted(client, db):
    model_id = client.post(
        "/v1/models", content=mlp_onnx(), headers={"Content-Type": "application/octet-stream"}
    ).json()["id"]
    row = db.scalar(select(UploadedModel).where(UploadedModel.id == model_id))
    # x [3] → Gemm → h [8] → Tanh → a [8] → Gemm → y [2]
    assert row.activation_elements == 8 + 8 + 2
    assert row.forward_flops == 8 * 2 * 3 + 8 + 2 * 2 * 8
    n = 8
    created = client.post(
        "/v1/jobs",
        json={
            "model": {"kind": "onnx", "id": model_id},
            "data": {"kind": "gaussian_mixture", "n_train": n, "input_dim": 3, "classes": 2},
        },
    )
    assert created.status_code == 202, created.text
    assert created.json()["spec"]["model"]["stored"]["activation_elements"] == 18
    assert row.nodes == created.json()["spec"]["model"]["stored"]["nodes"] == 3, "Gemm, Tanh, Gemm"
    estimate = created.json()["estimate"]
    assert estimate["memory"]["activations"] == 4 * (n * 18 + 2 * n * 9)
    # training: 5000 steps × 3 · 8 points · F, F = 88 counted FLOPs + 18 saved activations
    assert estimate["work"]["training"] == 5000 * 3 * n * (88 + 18)

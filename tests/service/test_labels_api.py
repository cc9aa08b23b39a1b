"""Labels as researchers have them, through the real app on SQLite and PostgreSQL (issue 26, item 1).

Cross-entropy takes one-hot rows y [n, C] and sklearn's integer class labels y [n]. Before, an uploaded
10-output ONNX model with an uploaded one-hot y [n, 10] was a 422 "training.loss = 'cross_entropy'
needs model.output_dim ≥ 2": the check ran on the request as parsed, before the service had read the
output width from the stored model. An integer y in one column is now class labels: the output width C
defaults to y_max + 1 (read at upload, datasets.y_min / y_max), labels outside [0, C) are a 422 on
data.id naming C, mse on them is a 422 on training, and a job on them runs through the worker's task body.
"""

from __future__ import annotations

import numpy as np
import pytest

from ntklab.store.job_store import JobStore
from ntklab.workers.tasks import execute
from tests.upload_files import mlp_onnx, mlp_weights, npz

N, D, C = 32, 3, 10
QUICK = {"diagnostics": {"hessian": None, "kernel": {"points": 2}, "save_kernels": [], "save_weights": False}}


def upload_dataset(client, y: np.ndarray) -> str:
    x = np.random.default_rng(0).normal(size=(N, D))
    answer = client.post("/v1/datasets", files={"file": ("d.npz", npz(x=x, y=y), "application/octet-stream")})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def upload_model(client, outputs: int = C) -> str:
    body = mlp_onnx(weights=mlp_weights(d=D, width=8, out=outputs))
    answer = client.post("/v1/models", files={"file": ("m.onnx", body, "application/octet-stream")})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def labels(high: int = C - 1, low: int = 0, dtype=np.int64) -> np.ndarray:
    y = np.random.default_rng(1).integers(low, high + 1, size=N).astype(dtype)
    y[0], y[-1] = low, high
    return y


def job(dataset_id: str, model: dict | None = None, loss: str = "cross_entropy") -> dict:
    return {
        "data": {"kind": "dataset", "id": dataset_id, "probe": {"n": 4}},
        "model": model or {"hidden": [8], "activation": "tanh"},
        "training": {"loss": loss, "max_steps": 3, "target_loss": None},
        **QUICK,
    }


def test_a_ten_output_onnx_model_on_one_hot_targets_takes_cross_entropy(client):
    dataset_id = upload_dataset(client, np.eye(C)[labels()])
    answer = client.post("/v1/jobs", json=job(dataset_id, {"kind": "onnx", "id": upload_model(client)}))
    assert answer.status_code == 202, answer.text
    assert answer.json()["spec"]["model"]["output_dim"] == C


def test_integer_labels_record_their_range_and_set_the_class_count(client):
    dataset_id = upload_dataset(client, labels(high=6, dtype=np.int32))
    answer = client.post("/v1/jobs", json=job(dataset_id))
    assert answer.status_code == 202, answer.text
    spec = answer.json()["spec"]
    assert {key: spec["data"]["stored"][key] for key in ("y_integer", "y_min", "y_max", "y_width")} == {
        "y_integer": True,
        "y_min": 0,
        "y_max": 6,
        "y_width": 1,
    }
    assert spec["model"]["output_dim"] == 7


def test_integer_labels_fit_a_ten_output_onnx_model_and_train(client, app, settings):
    dataset_id = upload_dataset(client, labels())
    job_id = client.post("/v1/jobs", json=job(dataset_id, {"kind": "onnx", "id": upload_model(client)})).json()["id"]
    store = JobStore(app.state.sessions)
    execute(store, store.claim(job_id, worker="w0", device="cpu"), settings, "cpu")
    done = client.get(f"/v1/jobs/{job_id}").json()
    assert done["status"] == "succeeded", done["error"]
    losses = client.get(f"/v1/jobs/{job_id}/metrics", params={"names": "loss"}).json()["loss"]["value"]
    assert len(losses) == 4 and all(np.isfinite(losses)) and losses[-1] < losses[0]


@pytest.mark.parametrize(("low", "high", "value"), [(0, C, C), (-1, 5, -1)])
def test_labels_outside_the_onnx_outputs_are_refused_naming_the_width(client, low, high, value):
    dataset_id = upload_dataset(client, labels(high=high, low=low))
    answer = client.post("/v1/jobs", json=job(dataset_id, {"kind": "onnx", "id": upload_model(client)}))
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["errors"]
    assert (error["field"], error["limit"], error["value"]) == ("data.id", C, value)
    assert f"class labels y from {low} to {high}" in error["message"] and f"[0, {C})" in error["message"]


def test_labels_past_a_given_output_dim_are_refused(client):
    dataset_id = upload_dataset(client, labels(high=4))
    answer = client.post("/v1/jobs", json=job(dataset_id, {"hidden": [8], "output_dim": 3}))
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["errors"]
    assert (error["field"], error["limit"], error["value"]) == ("data.id", 3, 4)


def test_mse_on_integer_labels_is_refused_naming_the_fix(client):
    dataset_id = upload_dataset(client, labels())
    answer = client.post("/v1/jobs", json=job(dataset_id, loss="mse"))
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["errors"]
    assert error["field"] == "training"
    assert "integer class labels" in error["message"] and "training.loss = 'cross_entropy'" in error["message"]


def test_integer_one_hot_rows_are_targets_not_labels(client):
    dataset_id = upload_dataset(client, np.eye(C, dtype=np.uint8)[labels()])
    for loss in ("mse", "cross_entropy"):
        answer = client.post("/v1/jobs", json=job(dataset_id, loss=loss))
        assert answer.status_code == 202, answer.text
        assert answer.json()["spec"]["model"]["output_dim"] == C

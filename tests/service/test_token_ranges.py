"""Token ids outside a model's embedding are refused at submission, not in the worker (issue 25, item 10).

An integer data set's smallest and largest x are read at upload (datasets.x_min, x_max); an integer-input
ONNX model's vocabulary is the least row count of the embedding tables (Gather, axis 0) that read its input
(models.input_vocabulary). A job pairing them is a 422 on data.id naming the vocabulary as the limit and
the offending id as the value, on both databases; before, it was queued and failed in the worker (an index
out of range in the embedding). The built-in graph's embedding layer gets the same check from the stored
range. Each refusal is checked against the data itself: ids drawn below the vocabulary are accepted.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.service.test_models_api import assert_refused
from tests.upload_files import npz

VOCAB, WIDTH, LENGTH, OUT = 50, 4, 6, 2


def embedding_onnx(vocab: int = VOCAB, reshaped: bool = False) -> bytes:
    """tokens [batch, T] int64 → Gather(E [vocab, 4]) → ReduceMean over T → MatMul [4, 2]; `reshaped`: the ids
    pass through Reshape(tokens, [-1, T]) first, as GPT-2's input_ids.view(-1, T)."""
    rng = np.random.default_rng(0)
    ids = "tokens"
    nodes = []
    if reshaped:
        ids = "rows"
        nodes.append(helper.make_node("Reshape", ["tokens", "target"], ["rows"]))
    nodes += [
        helper.make_node("Gather", ["E", ids], ["embedded"], axis=0, name="/embed/Gather"),
        helper.make_node("ReduceMean", ["embedded"], ["pooled"], axes=[1], keepdims=0),
        helper.make_node("MatMul", ["pooled", "W"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "embedding",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", LENGTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUT])],
        [
            numpy_helper.from_array(rng.normal(size=(vocab, WIDTH)).astype(np.float32), "E"),
            numpy_helper.from_array(rng.normal(size=(WIDTH, OUT)).astype(np.float32), "W"),
            numpy_helper.from_array(np.array([-1, LENGTH], np.int64), "target"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def dataset(client, low: int, high: int) -> str:
    tokens = np.random.default_rng(1).integers(low, high + 1, size=(12, LENGTH))
    tokens[0, 0], tokens[-1, -1] = low, high
    answer = client.post(
        "/v1/datasets", files={"file": ("tokens.npz", npz(x=tokens, y=np.zeros((12, OUT))), "application/octet-stream")}
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def onnx_job(model_id: str, dataset_id: str) -> dict:
    return {
        "model": {"kind": "onnx", "id": model_id},
        "data": {"kind": "dataset", "id": dataset_id, "probe": {"n": 2}},
        "training": {"max_steps": 1},
        "diagnostics": {"hessian": None, "save_kernels": [], "save_weights": False},
    }


def graph_job(dataset_id: str, vocab: int = VOCAB) -> dict:
    layers = [{"type": "embedding", "vocab": vocab, "width": WIDTH}, {"type": "flatten"}, {"type": "dense", "width": 8}]
    return {
        "model": {"kind": "graph", "layers": layers, "input_shape": [LENGTH]},
        "data": {"kind": "dataset", "id": dataset_id, "probe": {"n": 2}},
        "training": {"max_steps": 1},
        "diagnostics": {"hessian": None, "save_kernels": [], "save_weights": False},
    }


@pytest.fixture(params=["direct", "reshaped"])
def model_id(client, request) -> str:
    body = embedding_onnx(reshaped=request.param == "reshaped")
    answer = client.post("/v1/models", files={"file": ("embedding.onnx", body, "application/octet-stream")})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def test_the_upload_records_the_ids_and_the_vocabulary(client, model_id):
    dataset_id = dataset(client, 3, 41)
    answer = client.post("/v1/jobs", json=onnx_job(model_id, dataset_id))
    assert answer.status_code == 202, answer.text
    spec = answer.json()["spec"]
    assert (spec["data"]["stored"]["x_min"], spec["data"]["stored"]["x_max"]) == (3, 41)
    assert spec["model"]["stored"]["input_vocabulary"] == VOCAB


@pytest.mark.parametrize(("low", "high", "value"), [(0, VOCAB, VOCAB), (0, 10**6, 10**6), (-1, 10, -1)])
def test_ids_outside_the_onnx_models_embedding_are_a_422_on_data_id(client, model_id, low, high, value):
    problem = assert_refused(
        client.post("/v1/jobs", json=onnx_job(model_id, dataset(client, low, high))), 422, "data.id", f"[0, {VOCAB})"
    )
    (error,) = [error for error in problem["errors"] if error["field"] == "data.id"]
    assert (error["limit"], error["value"]) == (VOCAB, value)
    assert client.get("/v1/jobs").json()["data"] == []


def test_the_largest_id_below_the_vocabulary_is_accepted(client, model_id):
    assert client.post("/v1/jobs", json=onnx_job(model_id, dataset(client, 0, VOCAB - 1))).status_code == 202


def test_the_built_in_embedding_checks_the_stored_range_too(client):
    inside = client.post("/v1/jobs", json=graph_job(dataset(client, 0, VOCAB - 1)))
    assert inside.status_code == 202, inside.text
    outside = client.post("/v1/jobs", json=graph_job(dataset(client, 0, VOCAB)))
    assert outside.status_code == 422 and "ids from 0 to 50" in outside.text and f"[0, {VOCAB})" in outside.text

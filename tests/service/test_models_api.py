"""POST/GET/DELETE /v1/models on both backends: ONNX parsed (never run), checked, stored once per content and owner."""

from __future__ import annotations

import io
import pickle
import zipfile

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import func, select

from ntklab.store import api_keys
from ntklab.store.models import Blob, BlobChunk, UploadedModel
from tests.upload_files import mlp_model, mlp_onnx, npz

PROBLEM = "application/problem+json"
OCTET = {"Content-Type": "application/octet-stream"}


def upload(client, body: bytes, headers=None, **params):
    return client.post("/v1/models", content=body, headers=headers or OCTET, params=params)


def stored_rows(client) -> tuple[int, int, int]:
    with client.app.state.sessions() as session:
        return tuple(session.scalar(select(func.count()).select_from(t)) for t in (UploadedModel, Blob, BlobChunk))


def assert_refused(answer, status: int, field: str, *words: str) -> dict:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == PROBLEM
    problem = answer.json()
    assert field in [error["field"] for error in problem["errors"]], problem
    for word in words:
        assert word in problem["detail"], problem
    return problem


def job_on(model_id: str, **model) -> dict:
    return {
        "model": {"kind": "onnx", "id": model_id, **model},
        "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 3, "classes": 2},
        "training": {"max_steps": 5},
    }


# --------------------------------------------------------------------------- upload and read back


def test_an_onnx_mlp_is_described_without_running_it(client):
    answer = upload(client, mlp_onnx(), name="mlp")
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["id"].startswith("mdl_") and body["object"] == "model" and body["format"] == "onnx"
    assert body["name"] == "mlp" and body["opset"] == 17 and body["size"] == len(mlp_onnx())
    assert body["parameters"] == 8 * 3 + 8 + 2 * 8 + 2
    assert body["inputs"] == [{"name": "x", "dtype": "float64", "shape": ["batch", 3]}]
    assert body["outputs"] == [{"name": "y", "dtype": "float64", "shape": ["batch", 2]}]
    assert body["operators"] == ["Gemm", "Tanh"]
    assert client.get(f"/v1/models/{body['id']}").json() == body
    assert stored_rows(client) == (1, 1, 1)


def test_the_same_file_is_stored_once_per_owner(client):
    first = upload(client, mlp_onnx())
    again = client.post("/v1/models", files={"file": ("net.onnx", mlp_onnx(), "application/octet-stream")})
    assert first.status_code == 201 and again.status_code == 200, again.text
    assert first.json()["id"] == again.json()["id"] and stored_rows(client) == (1, 1, 1)
    other = upload(client, mlp_onnx(activation="Relu"))
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    page = client.get("/v1/models", params={"limit": 1}).json()
    assert [m["id"] for m in page["data"]] == [other.json()["id"]] and page["has_more"]
    assert client.delete(f"/v1/models/{other.json()['id']}").status_code == 204
    assert stored_rows(client) == (1, 1, 1)


def test_batch_norm_running_statistics_are_not_parameters(client):
    conv = numpy_helper.from_array(np.ones((2, 1, 3, 3)), "conv_w")
    bn = [numpy_helper.from_array(np.ones(2) * k, name) for k, name in enumerate(("scale", "bias", "mean", "var"), 1)]
    head = numpy_helper.from_array(np.ones((1, 2)), "head_w")
    nodes = [
        helper.make_node("Conv", ["x", "conv_w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "head_w"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "bn",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["n", 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, ["n", 1])],
        [conv, *bn, head],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    answer = upload(client, model.SerializeToString())
    assert answer.status_code == 201, answer.text
    assert answer.json()["parameters"] == 18 + 2 + 2 + 2, "conv, bn scale and bias, head: not the running mean and var"


# --------------------------------------------------------------------------- malicious and malformed uploads


def test_a_truncated_protobuf_is_422(client):
    whole = mlp_onnx()
    for cut in (len(whole) // 2, len(whole) - 3, 7):
        assert_refused(upload(client, whole[:cut]), 422, "file")
    assert stored_rows(client) == (0, 0, 0)


def test_an_external_data_reference_is_refused_naming_its_path(client):
    model = mlp_model()
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.ClearField("double_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "../../../etc/passwd"
    problem = assert_refused(upload(client, model.SerializeToString()), 422, "graph.initializer.w1", "external data")
    assert problem["errors"][0]["value"] == "../../../etc/passwd"
    assert stored_rows(client) == (0, 0, 0)


def test_a_2_gb_declared_tensor_is_refused_from_its_header(client):
    model = mlp_model()
    huge = TensorProto(name="huge", data_type=TensorProto.FLOAT, dims=[2**29], raw_data=b"")
    model.graph.initializer.append(huge)
    problem = assert_refused(upload(client, model.SerializeToString()), 413, "body", "declares a tensor ('huge')")
    assert problem["errors"][0]["value"] == 2**31
    lying = mlp_model()
    lying.graph.initializer[1].dims[0] = 1000
    assert_refused(upload(client, lying.SerializeToString()), 422, "graph.initializer.b1", "declares 8000 bytes")
    assert stored_rows(client) == (0, 0, 0)


def test_an_unknown_or_unsupported_operator_is_named(client):
    model = mlp_model()
    model.graph.node[1].op_type = "FancyActivation"
    problem = assert_refused(upload(client, model.SerializeToString()), 422, "graph.node.1", "FancyActivation")
    assert "supported:" in problem["detail"] and problem["errors"][0]["value"] == "FancyActivation"
    loop = mlp_model()
    loop.graph.node[1].op_type = "NonMaxSuppression"
    assert_refused(upload(client, loop.SerializeToString()), 422, "graph.node.1", "NonMaxSuppression")
    custom = mlp_model()
    custom.graph.node[1].domain = "com.microsoft"
    custom.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    assert_refused(upload(client, custom.SerializeToString()), 422, "opset_import", "com.microsoft")
    assert stored_rows(client) == (0, 0, 0)


def test_a_pickle_or_checkpoint_disguised_as_onnx_is_refused_explaining_why(client):
    disguised = client.post(
        "/v1/models", files={"file": ("net.onnx", pickle.dumps({"weights": np.ones(3)}), "application/octet-stream")}
    )
    assert_refused(disguised, 422, "file", "pickle", "can run")
    checkpoint = io.BytesIO()
    with zipfile.ZipFile(checkpoint, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"w": 1}))
    assert_refused(upload(client, checkpoint.getvalue()), 422, "file", "zip archive", "can run")
    named = client.post("/v1/models", files={"file": ("model.pt2", mlp_onnx(), "application/octet-stream")})
    assert_refused(named, 422, "file", "checkpoint", "can run code")
    assert_refused(upload(client, b"\x00\x01garbage" * 10), 422, "file")
    assert stored_rows(client) == (0, 0, 0)


def test_the_signature_must_be_one_batched_input_and_one_output(client):
    assert_refused(upload(client, mlp_onnx(batch=1)), 422, "graph.input", "symbolic batch axis")
    two = mlp_model()
    two.graph.input.append(helper.make_tensor_value_info("z", TensorProto.DOUBLE, ["batch", 3]))
    assert_refused(upload(client, two.SerializeToString()), 422, "graph.input", "exactly one input")
    malformed = mlp_model()
    malformed.graph.node[2].input[0] = "nowhere"
    assert_refused(upload(client, malformed.SerializeToString()), 422, "file", "malformed")


def test_caps_on_bytes_and_nodes(client_with):
    body = mlp_onnx()
    assert_refused(upload(client_with(max_upload_bytes=len(body) - 1), body), 413, "body", "max_upload_bytes")
    assert_refused(upload(client_with(max_model_nodes=2), body), 422, "graph.node", "max_model_nodes")


def test_the_node_cap_counts_initializers(client_with):
    model = mlp_model()
    nodes, initializers = len(model.graph.node), len(model.graph.initializer)
    assert initializers > 0
    cap = nodes + initializers
    assert upload(client_with(max_model_nodes=cap), model.SerializeToString()).status_code == 201
    problem = assert_refused(
        upload(client_with(max_model_nodes=cap - 1), model.SerializeToString()),
        422,
        "graph.node",
        "initializers",
        "max_model_nodes",
    )
    assert problem["errors"][0]["limit"] == cap - 1 and problem["errors"][0]["value"] == cap


def test_a_reshape_target_the_elements_do_not_fit_is_refused_at_upload(client):
    # [batch, 12] → Reshape [-1, 7]: shape inference with a symbolic batch cannot tell; at a batch of 1, 12 elements
    # do not fill rows of 7, and the worker would fail on the first forward pass.
    nodes = [
        helper.make_node("Reshape", ["x", "target"], ["rows"], name="/fold/Reshape"),
        helper.make_node("Tanh", ["rows"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fold",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 7])],
        [numpy_helper.from_array(np.array([-1, 7], np.int64), "target")],
    )
    body = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    assert_refused(upload(client, body), 422, "file", "cannot run on a batch of 1", "Reshape")
    assert stored_rows(client) == (0, 0, 0)


@pytest.mark.parametrize(
    ("opsets", "words"),
    [
        ([("", 9999)], ["9999", "outside the supported range"]),
        ([("", 6)], ["opset 6", "outside the supported range"]),
        ([("", 17), ("ai.onnx", 13)], ["exactly one default-domain opset"]),
        ([("", 17), ("", 13)], ["exactly one default-domain opset"]),
    ],
)
def test_an_opset_the_converter_cannot_honour_is_refused(client, opsets, words):
    model = mlp_model()
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid(domain, version) for domain, version in opsets)
    assert_refused(upload(client, model.SerializeToString()), 422, "opset_import", *words)
    assert stored_rows(client) == (0, 0, 0)


# --------------------------------------------------------------------------- jobs on a model


def test_a_job_on_an_onnx_model_gets_its_parameters_and_width(client):
    model_id = upload(client, mlp_onnx()).json()["id"]
    answer = client.post("/v1/jobs", json=job_on(model_id))
    assert answer.status_code == 202, answer.text
    spec = answer.json()["spec"]
    assert spec["model"]["stored"] == {
        "parameters": 50,
        "input_shape": [3],
        "output_dim": 2,
        "input_integer": False,
        "activation_elements": 8 + 8 + 2,
        "forward_flops": 8 * 2 * 3 + 8 + 2 * 2 * 8,
        "constant_bytes": 0,
        "constant_elements": 0,
        "folding_flops": 0,
        "fixed_elements": 0,
        "fixed_flops": 0,
        "input_vocabulary": None,
        "nodes": 3,
    }
    assert spec["model"]["parameterization"] == "standard" and spec["model"]["output_dim"] == 2
    assert answer.json()["parameters"] == 50


def test_jobs_that_do_not_fit_the_model_are_422(client, client_with):
    model_id = upload(client, mlp_onnx()).json()["id"]
    wrong_input = job_on(model_id)
    wrong_input["data"]["input_dim"] = 4
    assert_refused(client.post("/v1/jobs", json=wrong_input), 422, "model.id", "shape [3]")
    wrong_width = job_on(model_id)
    wrong_width["data"]["classes"] = 3
    assert client.post("/v1/jobs", json=wrong_width).status_code == 422
    assert_refused(client.post("/v1/jobs", json=job_on("mdl_" + "0" * 32)), 422, "model.id", "no model")
    assert client.post("/v1/jobs", json={"model": {"kind": "mlp", "id": model_id}}).status_code == 422
    capped = client_with(max_parameters=49)
    assert_refused(capped.post("/v1/jobs", json=job_on(model_id)), 422, "model", "trainable parameters 50")


@pytest.mark.parametrize("parameterization", ["standard", "ntk", "mup"])
def test_an_onnx_job_takes_its_parameterization(client, parameterization):
    model_id = upload(client, mlp_onnx()).json()["id"]
    answer = client.post("/v1/jobs", json=job_on(model_id, parameterization=parameterization))
    assert answer.status_code == 202, answer.text
    assert answer.json()["spec"]["model"]["parameterization"] == parameterization
    stored = client.get(f"/v1/jobs/{answer.json()['id']}").json()["spec"]["model"]
    assert stored["parameterization"] == parameterization


@pytest.mark.parametrize(
    "kind, parameterization, words",
    [
        ("onnx", "lecun", ["'standard'", "'mup'"]),  # unknown: the choices
        ("onnx", "meanfield", ["model.kind = 'onnx'", "'standard', 'ntk', 'mup'"]),
        ("mlp", "mup", ["model.kind = 'mlp'", "'ntk', 'standard', 'meanfield'"]),
    ],
)
def test_a_parameterization_the_kind_does_not_take_is_422_naming_the_field(client, kind, parameterization, words):
    model_id = upload(client, mlp_onnx()).json()["id"]
    body = job_on(model_id, parameterization=parameterization)
    if kind == "mlp":
        body["model"] = {"hidden": [8], "parameterization": parameterization}
    assert_refused(client.post("/v1/jobs", json=body), 422, "model.parameterization", *words)


def test_deleting_a_model_that_a_queued_job_uses_is_409(client):
    model_id = upload(client, mlp_onnx()).json()["id"]
    job = client.post("/v1/jobs", json=job_on(model_id)).json()
    answer = client.delete(f"/v1/models/{model_id}")
    assert answer.status_code == 409 and job["id"] in answer.json()["detail"]
    client.post(f"/v1/jobs/{job['id']}/cancel")
    assert client.delete(f"/v1/models/{model_id}").status_code == 204


def test_owners_see_use_and_delete_only_their_own_models(client_with):
    secured = client_with(auth="on", auth_cache_s=0)
    with secured.app.state.sessions() as session:
        alice = {"X-API-Key": api_keys.create_key(session, "alice").secret}
        bob = {"X-API-Key": api_keys.create_key(session, "bob").secret}
    assert upload(secured, mlp_onnx()).status_code == 401
    mine = upload(secured, mlp_onnx(), headers={**OCTET, **alice}).json()["id"]
    assert secured.get(f"/v1/models/{mine}", headers=bob).status_code == 404
    assert secured.get("/v1/models", headers=bob).json()["data"] == []
    assert_refused(secured.post("/v1/jobs", json=job_on(mine), headers=bob), 422, "model.id", "no model")
    assert secured.delete(f"/v1/models/{mine}", headers=bob).status_code == 404
    assert secured.post("/v1/jobs", json=job_on(mine), headers=alice).status_code == 202


def test_a_model_and_a_data_set_together(client):
    rng = np.random.default_rng(0)
    dataset_id = client.post(
        "/v1/datasets", content=npz(x=rng.normal(size=(10, 3)), y=rng.normal(size=(10, 2))), headers=OCTET
    ).json()["id"]
    model_id = upload(client, mlp_onnx()).json()["id"]
    answer = client.post(
        "/v1/jobs",
        json={
            "model": {"kind": "onnx", "id": model_id},
            "data": {"kind": "dataset", "id": dataset_id},
            "training": {"max_steps": 5},
        },
    )
    assert answer.status_code == 202, answer.text
    spec = answer.json()["spec"]
    assert spec["data"]["n_train"] == 10 and spec["model"]["stored"]["output_dim"] == 2


def test_a_model_lists_its_trainable_initializers_and_a_batch_norms_statistics_are_not_among_them(client):
    body = upload(client, mlp_onnx()).json()
    assert body["trainable"] == [
        {"name": "w1", "shape": [8, 3]},
        {"name": "b1", "shape": [8]},
        {"name": "w2", "shape": [2, 8]},
        {"name": "b2", "shape": [2]},
    ]
    model = mlp_model()
    model.graph.node[1].CopyFrom(
        helper.make_node("BatchNormalization", ["h", "g", "beta", "mean", "var"], ["a"], name="bn")
    )
    rng = np.random.default_rng(0)
    for name in ("g", "beta", "mean", "var"):
        model.graph.initializer.append(numpy_helper.from_array(np.abs(rng.normal(size=8)) + 0.1, name))
    answer = upload(client, model.SerializeToString())
    assert answer.status_code == 201, answer.text
    names = [t["name"] for t in answer.json()["trainable"]]
    assert names == ["w1", "b1", "w2", "b2", "g", "beta"] and answer.json()["parameters"] == 50 + 16


def test_an_attribute_the_converter_does_not_take_is_named_with_its_node_and_torch_module(client):
    model = mlp_model()
    model.graph.node[1].CopyFrom(helper.make_node("Tanh", ["h"], ["a"], name="/encoder/layer.0/act/Tanh", shiny=1))
    problem = assert_refused(upload(client, model.SerializeToString()), 422, "graph.node.1", "Tanh.shiny")
    assert problem["errors"][0]["message"] == (
        "operator 'Tanh' (node '/encoder/layer.0/act/Tanh', module /encoder/layer.0/act): "
        "attribute shiny is not supported"
    )
    assert stored_rows(client) == (0, 0, 0)

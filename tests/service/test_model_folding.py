"""POST /v1/models on both backends: what an uploaded graph computes from constants alone is bounded at upload.

The worker's converter computes every node whose inputs are all constants once, when it converts the model
(ntklab.api_schemas.uploads.constant_names), and holds the results for the job; the upload check counts those
constants' bytes and the FLOPs of folding them from the inferred shapes (nothing run) and refuses a graph over
max_folded_constant_bytes or max_folding_flops with a 422 naming the node that crosses the cap (issue 25,
item 1: a 5 KB model whose Concat doubling chain grew to 2.5 GB). Nodes computed from weights only run once
per forward pass: they are stored as fixed costs, and the job's estimate counts both.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import select

from ntklab.api_schemas.problems import RESOURCE_CAP
from ntklab.api_schemas.uploads import INVALID_UPLOAD
from ntklab.store.models import UploadedModel
from tests.service.test_models_api import assert_refused, stored_rows, upload


def model(nodes: list, initializers: list, d: int = 3, out: int = 2) -> bytes:
    graph = helper.make_graph(
        nodes,
        "folding",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", out])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def doubling_chain(doublings: int, base: int = 4) -> list:
    """Constant c0 of `base` floats, then c(i+1) = Concat(c(i), c(i)): node i holds base·2^i floats."""
    nodes = [helper.make_node("Constant", [], ["c0"], value=numpy_helper.from_array(np.ones(base, np.float32)))]
    nodes += [
        helper.make_node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0, name=f"/double.{i}/Concat")
        for i in range(doublings)
    ]
    return nodes


def reads_constant(name: str) -> list:
    """y = x · sum(name) (an x-dependent tail, so the graph is [batch, 3] → [batch, 3])."""
    return [
        helper.make_node("ReduceSum", [name], ["total"], keepdims=0),
        helper.make_node("Mul", ["x", "total"], ["y"]),
    ]


def test_a_doubling_concat_chain_past_the_byte_cap_is_refused_naming_its_node(client, settings):
    # 4 KB of protobuf: Constant [1024] then 30 doublings, 2^40 floats (8 TiB at float64) if it were folded.
    # The constants held after node i: Σ_{j ≤ i} 1024·2^j·8 bytes = 8192·(2^(i+1) − 1) > 512 MiB first at i = 16.
    body = model(doubling_chain(30, base=1024) + reads_constant("c30"), [], d=3, out=3)
    assert len(body) < 8 * 1024
    problem = assert_refused(upload(client, body), 422, "graph.node.16", "max_folded_constant_bytes")
    assert problem["type"] == RESOURCE_CAP
    (error,) = problem["errors"]
    assert error["limit"] == settings.max_folded_constant_bytes == 512 * 2**20
    assert error["value"] == 8192 * (2**17 - 1) > error["limit"]
    assert (
        "Concat" in error["message"]
        and "/double.15/Concat" in error["message"]
        and "module /double.15" in error["message"]
    )
    assert stored_rows(client) == (0, 0, 0)


def test_a_constant_matmul_chain_past_the_flop_cap_is_refused_naming_its_node(client_with):
    # ConstantOfShape [256, 256] (65 536 elements, 1 FLOP each), then M(i+1) = M(i)·M(i), 2·256³ = 33 554 432 FLOPs each:
    # past 10⁸ at the third MatMul, node 3.
    client = client_with(max_folding_flops=1e8)
    one = numpy_helper.from_array(np.array([1.0], np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["m0"], value=one)]
    nodes += [helper.make_node("MatMul", [f"m{i}", f"m{i}"], [f"m{i + 1}"], name=f"square_{i}") for i in range(5)]
    body = model(
        nodes + reads_constant("m5"), [numpy_helper.from_array(np.array([256, 256], np.int64), "shape")], out=3
    )
    problem = assert_refused(upload(client, body), 422, "graph.node.3", "max_folding_flops")
    (error,) = problem["errors"]
    assert problem["type"] == RESOURCE_CAP and error["limit"] == 10**8
    assert error["value"] == 65_536 + 3 * 2 * 256**3
    assert "square_2" in error["message"] and "MatMul" in error["message"]
    assert stored_rows(client) == (0, 0, 0)


def test_a_folded_range_of_computed_length_is_sized_by_evaluating_its_bounds(client):
    # Range(0, n) with n = 1000·1000 computed by a Mul: plain inference cannot tell its length; the upload check
    # evaluates the Mul (shape arithmetic, service/onnx_shapes.py) and counts 10⁶ int64 and 10⁶ float elements.
    i64 = lambda name, value: numpy_helper.from_array(np.array(value, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Mul", ["a", "b"], ["n"]),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["big"], to=TensorProto.FLOAT),
    ]
    body = model(nodes + reads_constant("big"), [i64("a", 1000), i64("b", 1000), i64("zero", 0), i64("one", 1)], out=3)
    answer = upload(client, body)
    assert answer.status_code == 201, answer.text
    with client.app.state.sessions() as db:
        row = db.scalar(select(UploadedModel).where(UploadedModel.id == answer.json()["id"]))
    # n (1 int64), r (10⁶ int64), big (10⁶ floats at 8 bytes), total (1 float)
    assert (row.constant_bytes, row.constant_elements) == (8 + 8 * 10**6 + 8 * 10**6 + 8, 10**6 + 1)


def test_a_folded_node_of_unknown_shape_is_refused(client):
    # Range(0, n) with n the sum of 70 000 ones: a float reduction over more than the 65 536 elements shape
    # arithmetic may evaluate, so n stays unknown and nothing bounds the Range's length.
    i64 = lambda name, value: numpy_helper.from_array(np.array(value, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("ConstantOfShape", ["count"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("ReduceSum", ["ones"], ["sum"], keepdims=0),
        helper.make_node("Cast", ["sum"], ["n"], to=TensorProto.INT64),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["big"], to=TensorProto.FLOAT),
    ]
    body = model(nodes + reads_constant("big"), [i64("count", [70_000]), i64("zero", 0), i64("one", 1)], out=3)
    problem = assert_refused(upload(client, body), 422, "graph.node.3", "cannot be inferred")
    assert problem["type"] == INVALID_UPLOAD and "Range" in problem["detail"]


def within_budget() -> bytes:
    """A doubling chain, a squared constant matrix and a weight squared on every forward pass, all within the caps.

    node  op           output      kind         elements   FLOPs
    0     Constant     c0 [4]      folded       4          4
    1-3   Concat       c1..c3      folded       8, 16, 32  8, 16, 32
    4     ReduceSum    total []    folded       1          1
    5     Constant     M [3, 3]    folded       9          9
    6     MatMul(M, M) M2 [3, 3]   folded       9          9·2·3 = 54
    7     MatMul(W, W) WW [3, 3]   fixed        9          54
    8     MatMul(x,WW) h [n, 3]    per example  3          18
    9     MatMul(h,M2) g [n, 3]    per example  3          18
    10    Mul(g,total) k [n, 3]    per example  3          3
    11    MatMul(k, V) y [n, 2]    per example  2          12
    """
    matrix = numpy_helper.from_array(np.full((3, 3), 0.5, np.float32))
    nodes = doubling_chain(3) + [
        helper.make_node("ReduceSum", ["c3"], ["total"], keepdims=0),
        helper.make_node("Constant", [], ["M"], value=matrix),
        helper.make_node("MatMul", ["M", "M"], ["M2"]),
        helper.make_node("MatMul", ["W", "W"], ["WW"]),
        helper.make_node("MatMul", ["x", "WW"], ["h"]),
        helper.make_node("MatMul", ["h", "M2"], ["g"]),
        helper.make_node("Mul", ["g", "total"], ["k"]),
        helper.make_node("MatMul", ["k", "V"], ["y"]),
    ]
    weights = [
        numpy_helper.from_array(np.eye(3, dtype=np.float32), "W"),
        numpy_helper.from_array(np.ones((3, 2), np.float32), "V"),
    ]
    return model(nodes, weights)


def test_within_the_caps_the_model_is_stored_with_what_it_costs_whatever_the_batch(client, db):
    answer = upload(client, within_budget())
    assert answer.status_code == 201, answer.text
    assert answer.json()["parameters"] == 9 + 6
    row = db.scalar(select(UploadedModel).where(UploadedModel.id == answer.json()["id"]))
    folded = 4 + 8 + 16 + 32 + 1 + 9 + 9
    assert (row.constant_bytes, row.constant_elements) == (8 * folded, folded), (
        "floats at 8 bytes, as a float64 job holds them"
    )
    assert row.folding_flops == 4 + 8 + 16 + 32 + 1 + 9 + 54
    assert (row.fixed_elements, row.fixed_flops) == (9, 54)
    assert (row.activation_elements, row.forward_flops) == (3 + 3 + 3 + 2, 18 + 18 + 3 + 12)

    n = 8
    created = client.post(
        "/v1/jobs",
        json={
            "model": {"kind": "onnx", "id": row.id},
            "training": {"max_steps": 5},
            "data": {"kind": "gaussian_mixture", "n_train": n, "input_dim": 3, "classes": 2},
        },
    )
    assert created.status_code == 202, created.text
    stored = created.json()["spec"]["model"]["stored"]
    assert (
        stored
        | {
            "constant_bytes": 8 * folded,
            "constant_elements": folded,
            "folding_flops": 124,
            "fixed_elements": 9,
            "fixed_flops": 54,
        }
        == stored
    )
    estimate = created.json()["estimate"]
    assert estimate["memory"]["constants"] == 4 * folded, "a float32 job holds them at 4 bytes"
    assert estimate["work"]["constants"] == 124
    # a = 11 saved, widest ℓ = 5; the fixed node's 9 elements once per step
    assert estimate["memory"]["activations"] == 4 * (n * 11 + 9 + 2 * n * 5)
    # 5 steps × 3 · (8 points × F + F_fix), F = 51 + 11, F_fix = 54 + 9: the weight's square once per pass
    assert estimate["work"]["training"] == 5 * 3 * (n * (51 + 11) + (54 + 9))

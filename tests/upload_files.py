"""Files for the upload tests: ONNX graphs built with onnx.helper (no torch needed) and .npz/.npy bytes."""

from __future__ import annotations

import io

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def mlp_weights(d: int = 3, width: int = 8, out: int = 2, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.normal(size=(width, d)) / np.sqrt(d),
        rng.normal(size=width),
        rng.normal(size=(out, width)) / np.sqrt(width),
        rng.normal(size=out),
    ]


def mlp_model(
    weights: list[np.ndarray] | None = None,
    *,
    activation: str = "Tanh",
    batch: str | int = "batch",
    elem_type: int = TensorProto.DOUBLE,
    opset: int = 17,
) -> onnx.ModelProto:
    """x [batch, d] → Gemm → activation → Gemm → y [batch, O], weights as initializers."""
    w1, b1, w2, b2 = weights if weights is not None else mlp_weights()
    dtype = np.float64 if elem_type == TensorProto.DOUBLE else np.float32
    inits = [
        numpy_helper.from_array(np.asarray(v, dtype=dtype), name)
        for v, name in zip((w1, b1, w2, b2), ("w1", "b1", "w2", "b2"))
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1, name="fc1"),
        helper.make_node(activation, ["h"], ["a"], name="act"),
        helper.make_node("Gemm", ["a", "w2", "b2"], ["y"], transB=1, name="fc2"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", elem_type, [batch, w1.shape[1]])],
        [helper.make_tensor_value_info("y", elem_type, [batch, w2.shape[0]])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def mlp_onnx(**kwargs) -> bytes:
    return mlp_model(**kwargs).SerializeToString()

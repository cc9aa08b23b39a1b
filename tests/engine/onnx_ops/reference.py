"""Checking one ONNX operator as the converter runs it against onnx's reference evaluator, and its gradient.

    model = single_node("Clip", ["x", "lo", "hi"], {"lo": np.array(-0.5), "hi": np.array(0.5)}, opset=13)
    assert_matches_reference(model, x)            # converted net(x) == ReferenceEvaluator(model).run(x), float64
    assert_gradient_matches_finite_differences(model, x)   # torch.autograd.gradcheck of x ↦ net(x) and of the weights
    assert_vmap_per_point_matches(model, x)       # vmap over points of net(x_i[None]) == net(x), as the jacobian kernel runs it
    assert_forward_mode_matches_reverse(model, x) # jacfwd == jacrev in x and the weights (the Hessian products use both)

The graph's one input is "x" (the batch); every other input of the node is an initializer
(float initializers with ≥ 1 dimension are trainable weights of the converted network,
integer and scalar ones constants), so the converter runs the node at run time, not folded.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.nets.onnx_model import OnnxNetwork, build_onnx_network

MODEL_ID = "mdl_" + "0" * 32
ELEMENT_TYPES = {
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def graph_model(
    nodes: list[onnx.NodeProto],
    x: np.ndarray,
    initializers: dict[str, np.ndarray] | None = None,
    *,
    opset: int = 18,
    output: str = "y",
) -> onnx.ModelProto:
    """A model with input x (x's element type, batch axis symbolic), the given nodes, output `output` (shape left open)."""
    inits = [numpy_helper.from_array(np.asarray(value), name) for name, value in (initializers or {}).items()]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", ELEMENT_TYPES[x.dtype], ["n", *x.shape[1:]])],
        [helper.make_tensor_value_info(output, TensorProto.UNDEFINED, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def single_node(
    op: str,
    inputs: list[str],
    x: np.ndarray,
    initializers: dict[str, np.ndarray] | None = None,
    *,
    opset: int = 18,
    outputs: tuple[str, ...] = ("y",),
    **attributes,
) -> onnx.ModelProto:
    """One node `op(inputs) -> outputs` with `attributes`; the first output is the graph's."""
    node = helper.make_node(op, inputs, list(outputs), **attributes)
    return graph_model([node], x, initializers, opset=opset, output=outputs[0])


def converted(model: onnx.ModelProto, dtype: torch.dtype = torch.float64) -> OnnxNetwork:
    return build_onnx_network(
        model_spec(kind="onnx", id=MODEL_ID, output_dim=1), model.SerializeToString(), dtype=dtype
    )


def reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


def assert_matches_reference(
    model: onnx.ModelProto, x: np.ndarray, *, rtol: float = 1e-12, atol: float = 1e-12
) -> None:
    """The converted network's output on x equals the reference evaluator's: shape, dtype kind and values."""
    expected = np.asarray(reference(model, x))
    with torch.no_grad():
        got = converted(model)(torch.as_tensor(x)).numpy()
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.dtype.kind == expected.dtype.kind or {got.dtype.kind, expected.dtype.kind} <= {"i", "u"}, (
        got.dtype,
        expected.dtype,
    )
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def assert_gradient_matches_finite_differences(
    model: onnx.ModelProto, x: np.ndarray, *, wrt_input: bool = True
) -> None:
    """torch.autograd.gradcheck (float64 central differences) of the converted network in x (if wrt_input) and its weights."""
    net = converted(model)
    weights = [p for p in net.parameters() if p.requires_grad]
    names = [name for name, p in net.named_parameters() if p.requires_grad]
    x0 = (
        torch.as_tensor(x, dtype=torch.float64).requires_grad_(wrt_input) if x.dtype.kind == "f" else torch.as_tensor(x)
    )

    def f(*args):
        inputs, values = (args[0], args[1:]) if wrt_input else (x0, args)
        return torch.func.functional_call(net, dict(zip(names, values)), (inputs,))

    args = ((x0,) if wrt_input else ()) + tuple(w.detach().clone().requires_grad_(True) for w in weights)
    assert args, "nothing to differentiate"
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-6, rtol=1e-5)


def assert_vmap_per_point_matches(model: onnx.ModelProto, x: np.ndarray) -> None:
    """torch.func.vmap of x_i ↦ net(x_i[None])[0] over the points equals net(x): how the jacobian kernel and the
    batched Hessian products call the network (no .item() or in-place write on a batched tensor)."""
    net = converted(model)
    batch = torch.as_tensor(x)
    with torch.no_grad():
        whole = net(batch)
        per_point = torch.func.vmap(lambda x_i: net(x_i.unsqueeze(0)).squeeze(0))(batch)
    torch.testing.assert_close(per_point, whole, rtol=1e-12, atol=1e-12)


def assert_forward_mode_matches_reverse(model, x: np.ndarray) -> None:
    """torch.func.jacfwd (jvp) equals jacrev (vmap over vjp) in x and in the weights: the Hessian products use both."""
    net = converted(model)
    weights = {name: p.detach() for name, p in net.named_parameters()}
    argnums = (0, 1) if weights else 1
    f = lambda w, x: torch.func.functional_call(net, w, (x,))  # noqa: E731
    with torch.no_grad():
        torch.testing.assert_close(
            torch.func.jacfwd(f, argnums)(weights, torch.as_tensor(x)),
            torch.func.jacrev(f, argnums)(weights, torch.as_tensor(x)),
            rtol=1e-12,
            atol=1e-12,
        )

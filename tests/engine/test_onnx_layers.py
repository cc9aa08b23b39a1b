"""The converter's layers (engine/nets/onnx_model.py): which ONNX patterns become ScaledLinear / ScaledConv2d /
ScaledConv1d / ScaledEmbedding, and that the structured kernel on them is the jacobian and ntk_vp kernels'.

Each pattern is built with onnx.helper (against onnx's reference evaluator) and exported by torch from a small
module (through ntklab.onnx_export.export_module, as the SDK uploads it; against the module). For each: the
parameters are covered (no fallback parameter, statically and on the probe points), the initializer each one
holds is named, and structured = jacobian = ntk_vp to 1e-10 in float64. Tied weights, constant inputs and
tensors batched on another axis must not be covered — and still give the same kernel.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from torch import nn

from ntklab.api_schemas.spec import AnyModel, model_spec
from ntklab.engine.kernels import kernel_rules, ntk
from ntklab.engine.kernels.layer_capture import capture, fallback_names, rule_parameters
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.nets.layers import ScaledConv1d, ScaledConv2d, ScaledEmbedding, ScaledLinear
from ntklab.engine.nets.onnx_model import build_onnx_network
from ntklab.onnx_export import export_module

F64 = torch.float64
D = TensorProto.DOUBLE
METHODS = ("jacobian", "ntk_vp", "structured")
rng = np.random.default_rng(0)


def spec(out: int) -> AnyModel:
    return model_spec(kind="onnx", id="mdl_" + "0" * 32, output_dim=out)


def init(name: str, value) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def W(*shape) -> np.ndarray:
    return rng.normal(size=shape) / np.sqrt(shape[-1] if len(shape) > 1 else 1)


def graph_bytes(nodes, x_shape, out: int, initializers, x_type=D, opset: int = 17) -> bytes:
    """x [n, *x_shape] → nodes → y [n, out]."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", x_type, ["n", *x_shape])],
        [helper.make_tensor_value_info("y", D, ["n", out])],
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8).SerializeToString()


def head(z: str, width: int, out: int = 2, *, reduce_axes=None) -> tuple[list, list]:
    """tanh(z), averaged over `reduce_axes`, then y = Gemm(·, V) [n, out]: nodes and initializers."""
    nodes = [helper.make_node("Tanh", [z], ["h"])]
    last = "h"
    if reduce_axes:
        nodes.append(helper.make_node("ReduceMean", ["h"], ["pooled"], axes=list(reduce_axes), keepdims=0))
        last = "pooled"
    nodes.append(helper.make_node("Gemm", [last, "head_w"], ["y"], transB=1))
    return nodes, [init("head_w", W(out, width))]


def kinds(net) -> list[str]:
    return [type(layer).__name__ for layer in net.layers]


def assert_kernels_agree(net, x, *, covered: bool = True) -> torch.Tensor:
    """structured = jacobian = ntk_vp (1e-10, float64); with `covered` no parameter falls back, else some do."""
    fallback = capture(net, x, lambda y: y).fallback
    if covered:
        assert fallback_names(net, rule_parameters(net)) == [] and fallback == []
    else:
        assert fallback
    kernels = {method: tangent_kernel(net, x, method=method) for method in METHODS}
    reference = kernels["jacobian"]
    assert float(reference.abs().max()) > 0
    for method, K in kernels.items():
        torch.testing.assert_close(K, reference, rtol=1e-10, atol=1e-12 * float(reference.abs().max()), msg=method)
    torch.testing.assert_close(
        tangent_kernel(net, x, method="auto"), reference, rtol=1e-10, atol=1e-12 * float(reference.abs().max())
    )
    return reference


def reference_outputs(onnx_bytes: bytes, x: np.ndarray) -> np.ndarray:
    import onnx

    return ReferenceEvaluator(onnx.load_from_string(onnx_bytes)).run(None, {"x": x})[0]


def converted(onnx_bytes: bytes, x: np.ndarray, out: int = 2):
    net = build_onnx_network(spec(out), onnx_bytes, dtype=F64)
    with torch.no_grad():
        got = net(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(got, reference_outputs(onnx_bytes, x), rtol=1e-12, atol=1e-12)
    return net


# --------------------------------------------------------------------------- Linear: the export patterns


def transpose_matmul(bias: str | None):
    """x [n, T, 3] → MatMul(x, Transpose(W)) (+ b, on the side `bias` says) → tanh → mean over T → Gemm."""
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["m"])]
    if bias == "after":
        nodes.append(helper.make_node("Add", ["m", "b"], ["z"]))
    elif bias == "before":
        nodes.append(helper.make_node("Add", ["b", "m"], ["z"]))
    tail, tail_inits = head("z" if bias else "m", 4, reduce_axes=[1])
    inits = [init("w", W(4, 3))] + ([init("b", W(4))] if bias else [])
    return nodes + tail, inits


@pytest.mark.parametrize("bias", [None, "after", "before"])
def test_transpose_matmul_add_is_a_linear_layer_holding_w_as_stored(bias):
    nodes, inits = transpose_matmul(bias)
    onnx_bytes = graph_bytes(nodes, [5, 3], 2, inits + head("z", 4)[1])
    x = rng.normal(size=(3, 5, 3))
    net = converted(onnx_bytes, x)
    assert kinds(net) == ["ScaledLinear", "ScaledLinear"]
    assert [step.op for step in net.steps] == ["MatMul", "Tanh", "ReduceMean", "Gemm"]
    expected = {"layers.0.weight": ("w", False), "layers.1.weight": ("head_w", False)}
    if bias:
        expected["layers.0.bias"] = ("b", False)
    assert net.parameter_sources == expected
    np.testing.assert_array_equal(net.layers[0].weight.detach().numpy(), numpy_helper.to_array(inits[0]))
    assert_kernels_agree(net, torch.as_tensor(x))


@pytest.mark.parametrize("bias", [False, True])
def test_matmul_by_an_initializer_with_or_without_add_is_a_linear_layer_holding_its_transpose(bias):
    nodes = [helper.make_node("MatMul", ["x", "B"], ["m"])] + (
        [helper.make_node("Add", ["m", "b"], ["z"])] if bias else []
    )
    tail, tail_inits = head("z" if bias else "m", 4, reduce_axes=[1])
    B = W(3, 4)
    onnx_bytes = graph_bytes(nodes + tail, [5, 3], 2, [init("B", B)] + ([init("b", W(4))] if bias else []) + tail_inits)
    x = rng.normal(size=(4, 5, 3))
    net = converted(onnx_bytes, x)
    assert kinds(net) == ["ScaledLinear", "ScaledLinear"] and net.parameter_sources["layers.0.weight"] == ("B", True)
    np.testing.assert_array_equal(net.layers[0].weight.detach().numpy(), B.T)
    assert ("layers.0.bias" in net.parameter_sources) == bias
    assert_kernels_agree(net, torch.as_tensor(x))


@pytest.mark.parametrize(
    "trans_b, alpha, beta, bias", [(1, 1.0, 1.0, True), (0, 1.0, 1.0, True), (1, 0.5, 2.0, True), (0, 1.5, 1.0, False)]
)
def test_gemm_is_a_linear_layer_with_alpha_and_beta_as_multipliers(trans_b, alpha, beta, bias):
    w = W(4, 3) if trans_b else W(3, 4)
    inputs = ["x", "w"] + (["b"] if bias else [])
    nodes = [helper.make_node("Gemm", inputs, ["z"], transB=trans_b, alpha=alpha, beta=beta)]
    tail, tail_inits = head("z", 4)
    onnx_bytes = graph_bytes(nodes + tail, [3], 2, [init("w", w)] + ([init("b", W(4))] if bias else []) + tail_inits)
    x = rng.normal(size=(5, 3))
    net = converted(onnx_bytes, x)
    layer = net.layers[0]
    assert isinstance(layer, ScaledLinear) and layer.weight_multiplier == alpha and layer.bias_multiplier == beta
    assert net.parameter_sources["layers.0.weight"] == ("w", not trans_b)
    assert_kernels_agree(net, torch.as_tensor(x))


def test_linear_of_a_2d_input_keeps_the_dense_rule():
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"]),
        helper.make_node("MatMul", ["x", "wt"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["z"]),
    ]
    tail, tail_inits = head("z", 4)
    onnx_bytes = graph_bytes(
        nodes + tail, [3], 2, [init("w", W(4, 3)), init("b", W(4))] + tail_inits
    )  # perm omitted: reversed
    x = rng.normal(size=(6, 3))
    net = converted(onnx_bytes, x)
    assert kinds(net) == ["ScaledLinear", "ScaledLinear"]
    assert_kernels_agree(net, torch.as_tensor(x))


def flattened_gemm(target: list[int] | None):
    """x [n, T, 4] → Reshape(x, target or [-1, 4] from Shape(x)) → Gemm(·, W, b) → Reshape back to [n, T, 5] → head
    (how torch exports GPT-2's Conv1D: x.view(-1, d), addmm, view)."""
    nodes = [
        helper.make_node("Gemm", ["a", "w", "b"], ["g"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two"], ["lead"]),
        helper.make_node("Concat", ["lead", "five"], ["back"], axis=0),
        helper.make_node("Reshape", ["g", "back"], ["z"]),
    ]
    inits = [
        init("w", W(4, 5)),
        init("b", W(5)),
        init("zero", np.array([0])),
        init("two", np.array([2])),
        init("five", np.array([5])),
    ]
    if target is None:
        nodes = [
            helper.make_node("Shape", ["x"], ["xs"]),
            helper.make_node("Slice", ["xs", "two", "three"], ["d"]),
            helper.make_node("Concat", ["minus", "d"], ["flat"], axis=0),
            helper.make_node("Reshape", ["x", "flat"], ["a"]),
        ] + nodes
        inits += [init("three", np.array([3])), init("minus", np.array([-1]))]
    else:
        nodes = [helper.make_node("Reshape", ["x", "flat"], ["a"])] + nodes
        inits.append(init("flat", np.array(target)))
    tail, tail_inits = head("z", 5, reduce_axes=[1])
    return nodes + tail, inits + tail_inits


@pytest.mark.parametrize("target", [None, [-1, 4]])
def test_gemm_of_flattened_tokens_is_a_linear_layer_on_the_tokens(target):
    nodes, inits = flattened_gemm(target)
    onnx_bytes = graph_bytes(nodes, [6, 4], 2, inits)
    x = rng.normal(size=(3, 6, 4))
    net = converted(onnx_bytes, x)
    assert kinds(net) == ["ScaledLinear", "ScaledLinear"] and net.parameter_sources["layers.0.weight"] == ("w", True)
    assert "Reshape" not in [step.op for step in net.steps][:2]
    assert_kernels_agree(net, torch.as_tensor(x))


def test_gemm_of_a_reshape_that_mixes_tokens_falls_back():
    """[n, 6, 4] → [n·3, 8]: rows mix two tokens, the layer's calls are not batched over the points."""
    nodes = [
        helper.make_node("Reshape", ["x", "flat"], ["a"]),
        helper.make_node("Gemm", ["a", "w"], ["g"]),
        helper.make_node("Reshape", ["g", "back"], ["z"]),
    ]
    tail, tail_inits = head("z", 5, reduce_axes=[1])
    inits = [init("flat", np.array([-1, 8])), init("w", W(8, 5)), init("back", np.array([-1, 3, 5]))] + tail_inits
    x = rng.normal(size=(3, 6, 4))
    net = converted(graph_bytes(nodes + tail, [6, 4], 2, inits), x)
    assert kinds(net) == ["ScaledLinear", "ScaledLinear"]
    assert capture(net, torch.as_tensor(x), lambda y: y).fallback == ["layers.0.weight"]
    assert_kernels_agree(net, torch.as_tensor(x), covered=False)


# --------------------------------------------------------------------------- what must not become a layer


def test_a_tied_weight_is_not_absorbed_and_its_kernel_is_still_exact():
    """B read by two MatMuls (tied), W's Transpose read twice: both stay `weights` parameters (fallback)."""
    nodes = [
        helper.make_node("MatMul", ["x", "B"], ["m1"]),
        helper.make_node("Tanh", ["m1"], ["t1"]),
        helper.make_node("MatMul", ["t1", "B"], ["m2"]),
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["m2", "wt"], ["m3"]),
        helper.make_node("MatMul", ["m3", "wt"], ["z"]),
    ]
    tail, tail_inits = head("z", 3, reduce_axes=[1])
    onnx_bytes = graph_bytes(nodes + tail, [4, 3], 2, [init("B", W(3, 3)), init("w", W(3, 3))] + tail_inits)
    x = rng.normal(size=(3, 4, 3))
    net = converted(onnx_bytes, x)
    assert kinds(net) == ["ScaledLinear"]  # the head only
    assert fallback_names(net, rule_parameters(net)) == ["weights.B", "weights.w"]
    assert net.parameter_sources["weights.B"] == ("B", False)
    assert_kernels_agree(net, torch.as_tensor(x), covered=False)


def test_a_bias_that_is_not_a_vector_of_the_output_width_stays_an_add():
    nodes = [helper.make_node("MatMul", ["x", "B"], ["m"]), helper.make_node("Add", ["m", "b"], ["z"])]
    tail, tail_inits = head("z", 4, reduce_axes=[1])
    onnx_bytes = graph_bytes(nodes + tail, [5, 3], 2, [init("B", W(3, 4)), init("b", W(5, 4))] + tail_inits)
    x = rng.normal(size=(3, 5, 3))
    net = converted(onnx_bytes, x)
    assert "layers.0.bias" not in net.parameter_sources and net.parameter_sources["weights.b"] == ("b", False)
    assert [step.op for step in net.steps][:2] == ["MatMul", "Add"]
    assert_kernels_agree(net, torch.as_tensor(x), covered=False)


def test_a_matmul_read_twice_keeps_its_output_and_a_graph_output_is_never_fused_away():
    """m = x·B is read by the Add and by a Mul: the Linear is bias-free and the Add stays."""
    nodes = [
        helper.make_node("MatMul", ["x", "B"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Mul", ["m", "a"], ["z"]),
    ]
    tail, tail_inits = head("z", 4)
    onnx_bytes = graph_bytes(nodes + tail, [3], 2, [init("B", W(3, 4)), init("b", W(4))] + tail_inits)
    x = rng.normal(size=(4, 3))
    net = converted(onnx_bytes, x)
    assert "layers.0.bias" not in net.parameter_sources and "weights.b" in net.parameter_sources
    assert_kernels_agree(net, torch.as_tensor(x), covered=False)
    exposed = [helper.make_node("MatMul", ["x", "B"], ["y"]), helper.make_node("Add", ["y", "b"], ["unused"])]
    graph = helper.make_graph(
        exposed,
        "g",
        [helper.make_tensor_value_info("x", D, ["n", 3])],
        [helper.make_tensor_value_info("y", D, ["n", 4])],
        [init("B", W(3, 4)), init("b", W(4))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    net = converted(model.SerializeToString(), x, out=4)
    assert "layers.0.bias" not in net.parameter_sources


def test_a_layer_on_a_constant_input_is_not_absorbed():
    """pos [T, 3] (a constant) · B: the product does not depend on the points, so B is a fallback parameter."""
    nodes = [helper.make_node("MatMul", ["pos", "B"], ["p"]), helper.make_node("Add", ["x", "p"], ["z"])]
    tail, tail_inits = head("z", 4, reduce_axes=[1])
    constant = helper.make_node("Constant", [], ["pos"], value=numpy_helper.from_array(W(5, 3)))
    onnx_bytes = graph_bytes([constant] + nodes + tail, [5, 4], 2, [init("B", W(3, 4))] + tail_inits)
    x = rng.normal(size=(3, 5, 4))
    net = converted(onnx_bytes, x)
    assert kinds(net) == ["ScaledLinear"] and "weights.B" in net.parameter_sources
    assert_kernels_agree(net, torch.as_tensor(x), covered=False)


class TimeMajorLinear(nn.Module):
    """x [n, T, d] → [T, n, d] → Linear → back → mean over T → Linear: the first Linear's points are on axis 1."""

    def __init__(self, d: int = 3, width: int = 4, out: int = 2) -> None:
        super().__init__()
        self.inner, self.head = nn.Linear(d, width), nn.Linear(width, out)

    def forward(self, x):
        return self.head(torch.tanh(self.inner(x.transpose(0, 1))).transpose(0, 1).mean(1))


def test_a_layer_batched_on_another_axis_falls_back_even_when_that_axis_has_n_entries():
    """T = n = 4: the inner Linear's input [T, n, d] has n entries on axis 0, but its points lie on axis 1;
    treating axis 0 as the points would give a wrong kernel. The one-point forward sees [T, 1, d] and refuses."""
    torch.manual_seed(0)
    module = TimeMajorLinear().double().eval()
    x = torch.randn(4, 4, 3, dtype=F64)
    net = build_onnx_network(spec(2), export(module, x), dtype=F64)
    assert kinds(net) == ["ScaledLinear", "ScaledLinear"]
    torch.testing.assert_close(net(x), module(x), rtol=1e-12, atol=1e-12)
    assert capture(net, x, lambda y: y).fallback == ["layers.0.weight", "layers.0.bias"]
    assert_kernels_agree(net, x, covered=False)
    assert capture(net, x[:3], lambda y: y).fallback == ["layers.0.weight", "layers.0.bias"]  # T ≠ n: axis 0 is not [n]


# --------------------------------------------------------------------------- Conv


CONVS = {
    # name: (weight shape, attributes, input shape [C, H, W] or [C, L])
    "plain": ((3, 2, 3, 3), dict(pads=[1, 1, 1, 1]), (2, 6, 5)),
    "grouped": ((4, 1, 2, 2), dict(group=2, pads=[0, 1, 1, 0], dilations=[1, 2]), (2, 5, 5)),
    "depthwise": ((6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1], strides=[2, 2]), (6, 5, 6)),
    "depthwise_multiplier": ((6, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1]), (3, 4, 4)),
    "dilated": ((3, 2, 3, 3), dict(dilations=[2, 3], pads=[2, 3, 2, 3]), (2, 7, 8)),
    "rectangular": ((3, 2, 3, 1), dict(strides=[2, 1], pads=[1, 0, 1, 0]), (2, 7, 4)),
    "asymmetric_pads": ((3, 2, 2, 3), dict(pads=[0, 2, 1, 0], strides=[1, 2]), (2, 5, 6)),
    "same_upper": ((3, 2, 2, 2), dict(auto_pad="SAME_UPPER", strides=[2, 2]), (2, 5, 6)),
    "same_lower": ((3, 2, 2, 3), dict(auto_pad="SAME_LOWER"), (2, 5, 4)),
    "valid": ((3, 2, 3, 3), dict(auto_pad="VALID", kernel_shape=[3, 3]), (2, 5, 5)),
    "conv1d": ((3, 2, 3), dict(pads=[2, 1], dilations=[2]), (2, 9)),
    "conv1d_depthwise": ((4, 1, 3), dict(group=4, strides=[2], auto_pad="SAME_UPPER"), (4, 8)),
}


def conv_graph(name: str, bias: bool = True) -> tuple[bytes, tuple]:
    shape, attributes, x_shape = CONVS[name]
    inputs = ["x", "w"] + (["b"] if bias else [])
    nodes = [
        helper.make_node("Conv", inputs, ["c"], **attributes),
        helper.make_node("Tanh", ["c"], ["h"]),
        helper.make_node("GlobalAveragePool", ["h"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "head_w"], ["y"], transB=1),
    ]
    inits = [init("w", W(*shape)), init("head_w", W(2, shape[0]))] + ([init("b", W(shape[0]))] if bias else [])
    return graph_bytes(nodes, list(x_shape), 2, inits), x_shape


@pytest.mark.parametrize("name", sorted(CONVS))
def test_every_conv_variant_is_a_layer_with_the_exact_kernel(name):
    onnx_bytes, x_shape = conv_graph(name)
    x = rng.normal(size=(3, *x_shape))
    net = converted(onnx_bytes, x)
    layer = net.layers[0]
    assert type(layer) is (ScaledConv1d if len(x_shape) == 2 else ScaledConv2d)
    assert layer.groups == CONVS[name][1].get("group", 1)
    assert tuple(layer.weight.shape) == CONVS[name][0]  # the initializer's own shape
    assert net.parameter_sources == {
        "layers.0.weight": ("w", False),
        "layers.0.bias": ("b", False),
        "layers.1.weight": ("head_w", False),
    }
    assert_kernels_agree(net, torch.as_tensor(x))


@pytest.mark.parametrize("per_sample", [True, False])
@pytest.mark.parametrize("name", ["grouped", "depthwise_multiplier", "conv1d_depthwise", "asymmetric_pads"])
def test_per_sample_and_position_sum_rules_agree_on_convolutions(name, per_sample, monkeypatch):
    onnx_bytes, x_shape = conv_graph(name, bias=False)
    x = torch.as_tensor(rng.normal(size=(3, *x_shape)))
    net = build_onnx_network(spec(2), onnx_bytes, dtype=F64)
    reference = tangent_kernel(net, x, method="jacobian")
    chosen = []
    monkeypatch.setattr(kernel_rules, "use_per_sample", lambda *args: chosen.append(per_sample) or per_sample)
    torch.testing.assert_close(tangent_kernel(net, x, method="structured"), reference, rtol=1e-10, atol=1e-13)
    assert chosen
    for budget in (1, 700):  # one channel (or one row) per chunk, then a few
        monkeypatch.setattr(ntk, "MEMORY_BUDGET_BYTES", budget)
        torch.testing.assert_close(tangent_kernel(net, x, method="structured"), reference, rtol=1e-10, atol=1e-13)


def test_a_conv_weight_read_twice_is_not_absorbed():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Tanh", ["c1"], ["t"]),
        helper.make_node("Conv", ["t", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Tanh", ["c"], ["h"]),
        helper.make_node("GlobalAveragePool", ["h"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "head_w"], ["y"], transB=1),
    ]
    onnx_bytes = graph_bytes(nodes, [2, 4, 4], 2, [init("w", W(2, 2, 3, 3)), init("head_w", W(2, 2))])
    x = rng.normal(size=(3, 2, 4, 4))
    net = converted(onnx_bytes, x)
    assert kinds(net) == ["ScaledLinear"] and fallback_names(net, rule_parameters(net)) == ["weights.w"]
    assert_kernels_agree(net, torch.as_tensor(x), covered=False)


# --------------------------------------------------------------------------- Embedding


@pytest.mark.parametrize("axis", [0, -2])
def test_gather_of_a_table_is_an_embedding_and_negative_ids_count_from_the_end(axis):
    nodes = [helper.make_node("Gather", ["E", "x"], ["e"], axis=axis)]
    tail, tail_inits = head("e", 4, reduce_axes=[1])
    onnx_bytes = graph_bytes(nodes + tail, [5], 2, [init("E", W(7, 4))] + tail_inits, x_type=TensorProto.INT64)
    tokens = rng.integers(-7, 7, size=(4, 5))
    tokens[0, :2] = [3, -4]  # the same row twice, by a positive and a negative id
    net = converted(onnx_bytes, tokens)
    assert isinstance(net.layers[0], ScaledEmbedding) and net.parameter_sources["layers.0.weight"] == ("E", False)
    assert_kernels_agree(net, torch.as_tensor(tokens))


def test_gather_at_constant_ids_stays_a_fallback_parameter():
    """A position table read at constant ids [1, T] is the same for every point: not an embedding layer."""
    nodes = [
        helper.make_node("Gather", ["E", "x"], ["e"]),
        helper.make_node("Gather", ["P", "positions"], ["p"]),
        helper.make_node("Add", ["e", "p"], ["z"]),
    ]
    tail, tail_inits = head("z", 4, reduce_axes=[1])
    inits = [init("E", W(7, 4)), init("P", W(5, 4)), init("positions", np.arange(5)[None, :])] + tail_inits
    onnx_bytes = graph_bytes(nodes + tail, [5], 2, inits, x_type=TensorProto.INT64)
    tokens = rng.integers(0, 7, size=(3, 5))
    net = converted(onnx_bytes, tokens)
    assert kinds(net) == ["ScaledEmbedding", "ScaledLinear"]
    assert capture(net, torch.as_tensor(tokens), lambda y: y).fallback == ["weights.P"]
    assert_kernels_agree(net, torch.as_tensor(tokens), covered=False)


# --------------------------------------------------------------------------- torch exports


def export(module: nn.Module, x: torch.Tensor) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export_module(module, x)


class SequenceLinear(nn.Module):
    """nn.Linear on tokens [n, T, d] (exported as Transpose → MatMul (→ Add)), then a bias-free one, mean, a head."""

    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.first, self.second, self.head = nn.Linear(3, 5, bias=bias), nn.Linear(5, 4, bias=False), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.second(torch.tanh(self.first(x)))).mean(1))


class Conv1D(nn.Module):
    """Hugging Face GPT-2's Conv1D: y = x·W + b by addmm on x.view(-1, in), W [in, out]."""

    def __init__(self, fan_in: int, out: int) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(fan_in, out) / fan_in**0.5), nn.Parameter(torch.randn(out))

    def forward(self, x):
        size = x.size()[:-1] + (self.weight.size(-1),)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size)


class GPT2Style(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_fc, self.c_proj, self.head = Conv1D(3, 6), Conv1D(6, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.c_proj(torch.tanh(self.c_fc(x)))).mean(1))


class Tokens(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.fc, self.head = nn.Embedding(9, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, t):
        return self.head(torch.tanh(self.fc(self.embed(t))).mean(1))


def image_net(*convs: nn.Module, channels: int) -> nn.Module:
    layers: list[nn.Module] = []
    for conv in convs:
        layers += [conv, nn.Tanh()] if isinstance(conv, (nn.Conv1d, nn.Conv2d)) else [conv]
    pool = nn.AdaptiveAvgPool1d(1) if any(isinstance(c, nn.Conv1d) for c in convs) else nn.AdaptiveAvgPool2d(1)
    return nn.Sequential(*layers, pool, nn.Flatten(), nn.Linear(channels, 2))


EXPORTS = {
    "linear_bias": (lambda: SequenceLinear(bias=True), lambda: torch.randn(4, 5, 3, dtype=F64), ["Linear"] * 3),
    "linear_no_bias": (lambda: SequenceLinear(bias=False), lambda: torch.randn(4, 5, 3, dtype=F64), ["Linear"] * 3),
    "gpt2_conv1d": (GPT2Style, lambda: torch.randn(4, 5, 3, dtype=F64), ["Linear"] * 3),
    "embedding": (Tokens, lambda: torch.randint(0, 9, (4, 6)), ["Embedding", "Linear", "Linear"]),
    "depthwise": (
        lambda: image_net(nn.Conv2d(3, 6, 1), nn.Conv2d(6, 6, 3, padding=1, groups=6, bias=False), channels=6),
        lambda: torch.randn(3, 3, 6, 6, dtype=F64),
        ["Conv2d", "Conv2d", "Linear"],
    ),
    "grouped": (
        lambda: image_net(nn.Conv2d(4, 6, 3, groups=2, stride=2), channels=6),
        lambda: torch.randn(3, 4, 7, 7, dtype=F64),
        ["Conv2d", "Linear"],
    ),
    "dilated": (
        lambda: image_net(nn.Conv2d(2, 3, 3, dilation=2, padding=2), channels=3),
        lambda: torch.randn(3, 2, 7, 6, dtype=F64),
        ["Conv2d", "Linear"],
    ),
    "rectangular": (
        lambda: image_net(nn.Conv2d(2, 3, (3, 1), stride=(2, 1), padding=(1, 2)), channels=3),
        lambda: torch.randn(3, 2, 7, 5, dtype=F64),
        ["Conv2d", "Linear"],
    ),
    "zero_pad": (
        lambda: image_net(nn.ZeroPad2d((1, 2, 0, 1)), nn.Conv2d(2, 3, 2), channels=3),
        lambda: torch.randn(3, 2, 5, 5, dtype=F64),
        ["Conv2d", "Linear"],
    ),
    "same_even_kernel": (
        lambda: image_net(nn.Conv2d(2, 3, (2, 4), padding="same"), channels=3),
        lambda: torch.randn(3, 2, 5, 6, dtype=F64),
        ["Conv2d", "Linear"],
    ),
    "conv1d": (
        lambda: image_net(
            nn.Conv1d(2, 4, 3, padding=1), nn.Conv1d(4, 4, 3, stride=2, dilation=2, groups=4, padding=(2,)), channels=4
        ),
        lambda: torch.randn(3, 2, 11, dtype=F64),
        ["Conv1d", "Conv1d", "Linear"],
    ),
}


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_a_torch_export_has_every_weight_in_a_layer_and_the_exact_kernel(name):
    make, make_x, torch_layers = EXPORTS[name]
    torch.manual_seed(0)
    module = make().double().eval()
    x = make_x()
    net = build_onnx_network(spec(2), export(module, x), dtype=F64)
    for batch in (x, x[:1]):
        torch.testing.assert_close(net(batch), module(batch), rtol=1e-12, atol=1e-12)
    expected = {"Linear": ScaledLinear, "Embedding": ScaledEmbedding, "Conv2d": ScaledConv2d, "Conv1d": ScaledConv1d}
    assert [type(layer) for layer in net.layers] == [expected[kind] for kind in torch_layers]
    # every parameter of the module is one of the network's, by its initializer's name (= the module's parameter name)
    params = dict(net.named_parameters())
    sources = {source: (params[name], transposed) for name, (source, transposed) in net.parameter_sources.items()}
    assert set(sources) == {name for name, _ in module.named_parameters()}
    for source, p in module.named_parameters():
        value, transposed = sources[source]
        torch.testing.assert_close(value.T if transposed else value, p, rtol=0, atol=0)
    assert_kernels_agree(net, x)

"""Comparisons, Not/And/Or/Xor and Where as the converter runs them, against onnx's reference evaluator: bool
results, numpy broadcasting, the per-point vmap the jacobian kernel uses, and Where's gradient in X and Y."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

from tests.engine.onnx_ops.reference import (
    assert_forward_mode_matches_reverse,
    assert_gradient_matches_finite_differences,
    assert_matches_reference,
    assert_vmap_per_point_matches,
    converted,
    graph_model,
    single_node,
)

# (x's shape, a second operand's shape broadcasting against it; never expanding the batch axis)
SHAPES = [((3, 4), (4,)), ((2, 3, 4), (3, 1)), ((3, 1, 4), (2, 1)), ((4,), ())]


def check(model, x: np.ndarray) -> torch.Tensor:
    assert_matches_reference(model, x)
    assert_vmap_per_point_matches(model, x)
    with torch.no_grad():
        return converted(model)(torch.as_tensor(x))


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_comparisons_give_bool_with_broadcasting_and_ties(op, shapes, dtype):
    rng = np.random.default_rng([sum(map(ord, op)), len(shapes[0]), len(shapes[1])])
    x_shape, c_shape = shapes
    x = rng.integers(-2, 3, size=x_shape).astype(dtype)  # few values: many ties, which Equal and the ≤, ≥ see
    c = rng.integers(-2, 3, size=c_shape).astype(dtype)
    assert check(single_node(op, ["x", "c"], x, {"c": c}), x).dtype == torch.bool


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_binary_logic_on_bool_tensors_with_broadcasting(op, shapes):
    rng = np.random.default_rng([sum(map(ord, op)), len(shapes[0]), len(shapes[1])])
    x_shape, c_shape = shapes
    x, c = rng.random(x_shape) < 0.5, rng.random(c_shape) < 0.5
    assert check(single_node(op, ["x", "c"], x, {"c": c}), x).dtype == torch.bool


@pytest.mark.parametrize("shape", [s for s, _ in SHAPES])
def test_not(shape):
    x = np.random.default_rng(len(shape)).random(shape) < 0.5
    assert check(single_node("Not", ["x"], x), x).dtype == torch.bool


@pytest.mark.parametrize("opset", [13, 18])
def test_comparisons_combined_by_logic_and_cast_to_float(opset):
    x = np.random.default_rng(opset).normal(size=(4, 5))
    nodes = [
        helper.make_node("Greater", ["x", "lo"], ["above"]),
        helper.make_node("LessOrEqual", ["x", "hi"], ["below"]),
        helper.make_node("And", ["above", "below"], ["inside"]),
        helper.make_node("Not", ["inside"], ["outside"]),
        helper.make_node("Xor", ["outside", "above"], ["mixed"]),
        helper.make_node("Cast", ["mixed"], ["y"], to=TensorProto.DOUBLE),
    ]
    model = graph_model(nodes, x, {"lo": np.array(-0.5), "hi": np.array(0.5)}, opset=opset)
    assert check(model, x).dtype == torch.float64


@pytest.mark.parametrize("x_shape, w_shape", [((3, 4), (4,)), ((2, 3, 4), (3, 1)), ((3, 1, 4), (2, 1)), ((4,), (1,))])
def test_where_selects_and_is_differentiable_in_x_and_y(x_shape, w_shape):
    rng = np.random.default_rng([*x_shape, *w_shape])
    x = rng.normal(size=x_shape)
    x = np.where(np.abs(x - 0.2) < 0.05, 0.3, x)  # off the condition's switch at x = 0.2
    nodes = [
        helper.make_node("Greater", ["x", "t"], ["condition"]),
        helper.make_node("Mul", ["x", "a"], ["ax"]),
        helper.make_node("Where", ["condition", "ax", "b"], ["y"]),
    ]
    model = graph_model(nodes, x, {"t": np.array(0.2), "a": rng.normal(size=w_shape), "b": rng.normal(size=w_shape)})
    check(model, x)
    assert_gradient_matches_finite_differences(model, x)  # in x and in both weights, a (of X) and b (of Y)
    assert_forward_mode_matches_reverse(model, x)


def test_where_with_a_constant_mask_broadcasting_against_x():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 2, 4))
    model = single_node("Where", ["mask", "x", "b"], x, {"mask": rng.random((2, 1)) < 0.5, "b": rng.normal(size=(4,))})
    check(model, x)
    assert_gradient_matches_finite_differences(model, x)
    assert_forward_mode_matches_reverse(model, x)


@pytest.mark.parametrize("negative, positive", [(1, 1), (0, 1), (1, 0)])
def test_isnan_and_isinf_against_the_reference(negative, positive):
    x = np.array([[0.5, np.nan, np.inf, -np.inf, -2.0]])
    nan = graph_model(
        [helper.make_node("IsNaN", ["x"], ["b"]), helper.make_node("Cast", ["b"], ["y"], to=TensorProto.DOUBLE)], x
    )
    assert_matches_reference(nan, x)
    inf = graph_model(
        [
            helper.make_node("IsInf", ["x"], ["b"], detect_negative=negative, detect_positive=positive),
            helper.make_node("Cast", ["b"], ["y"], to=TensorProto.DOUBLE),
        ],
        x,
    )
    assert_matches_reference(inf, x)

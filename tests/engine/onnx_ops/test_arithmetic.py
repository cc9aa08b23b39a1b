"""Abs … Ceil, Min, Max, Clip, Mod, Einsum as the converter runs them, against onnx's reference evaluator (float64),
with their gradients (finite differences) and the per-point vmap the jacobian kernel uses."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ntklab.engine.nets.onnx_ops.registry import OnnxConversionError
from tests.engine.onnx_ops.reference import (
    assert_forward_mode_matches_reverse,
    assert_gradient_matches_finite_differences,
    assert_matches_reference,
    assert_vmap_per_point_matches,
    converted,
    single_node,
)

# (x's shape, a second operand's shape broadcasting against it; never expanding the batch axis)
SHAPES = [((3, 4), (4,)), ((2, 3, 4), (3, 1)), ((3, 1, 4), (2, 1)), ((2, 3), (1, 3)), ((4,), (1,))]


def check(model, x: np.ndarray, *, gradient: bool = True) -> None:
    assert_matches_reference(model, x)
    assert_vmap_per_point_matches(model, x)
    if gradient:
        assert_gradient_matches_finite_differences(model, x)
        assert_forward_mode_matches_reverse(model, x)


def away_from_integers(x: np.ndarray) -> np.ndarray:
    """x moved to the middle part (0.1 … 0.9) of its unit interval: away from the steps of Floor, Ceil, Sign."""
    return np.floor(x) + 0.1 + 0.8 * (x - np.floor(x))


@pytest.mark.parametrize("shape", [s for s, _ in SHAPES])
@pytest.mark.parametrize("op", ["Abs", "Reciprocal", "Sin", "Cos", "Sign", "Floor", "Ceil"])
def test_unary_ops_match_the_reference_gradient_and_vmap(op, shape):
    rng = np.random.default_rng([sum(map(ord, op)), *shape])
    x = away_from_integers(rng.normal(size=shape) * 3)  # |x| ≥ 0.1: off Abs's kink and Reciprocal's pole
    check(single_node(op, ["x"], x), x)


@pytest.mark.parametrize("op", ["Abs", "Sign"])
def test_abs_and_sign_keep_integers(op):
    x = np.array([[-3, 0, 2], [5, -1, 0]], dtype=np.int64)
    check(single_node(op, ["x"], x), x, gradient=False)


@pytest.mark.parametrize("operands", [0, 1, 2])
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("op", ["Min", "Max"])
def test_min_max_over_any_number_of_broadcast_inputs(op, shapes, operands):
    rng = np.random.default_rng(7 + 10 * operands + len(shapes[0]))
    x_shape, w_shape = shapes
    x = rng.normal(size=x_shape)
    weights = {f"w{i}": rng.normal(size=w_shape[i:] or (1,)) for i in range(operands)}  # distinct values: no ties
    check(single_node(op, ["x", *weights], x, weights), x)


@pytest.mark.parametrize(
    "bounds", [{"min": -0.5, "max": 0.75}, {"min": -0.5}, {"max": 0.25}, {}, {"min": 0.5, "max": -0.5}]
)
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 2)])
def test_clip_with_attributes_at_opset_6(shape, bounds):
    x = np.random.default_rng(len(bounds)).normal(size=shape)
    check(single_node("Clip", ["x"], x, opset=6, **bounds), x)


@pytest.mark.parametrize("bounds", [("lo", "hi"), ("lo",), ("", "hi"), (), ("hi", "lo")])
@pytest.mark.parametrize("opset", [13, 21])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 2)])
def test_clip_with_optional_min_max_inputs(shape, opset, bounds):
    x = np.random.default_rng(opset + len(bounds)).normal(size=shape)
    constants = {"lo": np.array(-0.5), "hi": np.array(0.75)}  # ("hi", "lo"): min > max sets everything to max
    check(single_node("Clip", ["x", *bounds], x, {k: v for k, v in constants.items() if k in bounds}, opset=opset), x)


def test_clip_of_integers_keeps_them_integers():
    x = np.arange(-6, 6, dtype=np.int64).reshape(3, 4)
    check(
        single_node("Clip", ["x", "lo", "hi"], x, {"lo": np.array(-2), "hi": np.array(3)}, opset=13), x, gradient=False
    )


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("shapes", SHAPES)
def test_mod_of_floats_takes_the_sign_of_the_divisor_or_of_the_dividend(shapes, fmod):
    rng = np.random.default_rng(fmod + 3 * len(shapes[1]))
    x_shape, w_shape = shapes
    x = rng.normal(size=x_shape) * 5
    divisor = rng.choice([-1, 1], size=w_shape) * rng.uniform(0.7, 2.0, size=w_shape)  # negative ones too
    check(single_node("Mod", ["x", "w"], x, {"w": divisor}, fmod=fmod), x)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_of_negative_integers(fmod):
    x = np.arange(-7, 8, dtype=np.int64).reshape(3, 5)
    divisor = np.array([3, -3, 4, -2, 5], dtype=np.int64)
    check(single_node("Mod", ["x", "w"], x, {"w": divisor}, fmod=fmod), x, gradient=False)


def test_mod_refuses_an_fmod_it_does_not_know_by_name():
    x = np.ones((2, 3))
    with pytest.raises(OnnxConversionError, match="Mod: fmod=2 is not supported"):
        converted(single_node("Mod", ["x", "w"], x, {"w": np.ones(3)}, fmod=2))


@pytest.mark.parametrize(
    "equation, x_shape, w_shapes",
    [
        ("bi,ij->bj", (3, 4), [(4, 2)]),
        ("bi, ij -> bj", (3, 4), [(4, 2)]),  # spaces
        ("bi,ij", (3, 4), [(4, 2)]),  # implicit output: the once-used indices, sorted
        ("bij,jk->bik", (2, 3, 4), [(4, 2)]),
        ("bi,i->b", (3, 4), [(4,)]),
        ("bii->bi", (2, 3, 3), []),  # a diagonal
        ("bij->bji", (2, 3, 4), []),
        ("b...i,ij->b...j", (2, 3, 4), [(4, 2)]),  # an ellipsis
        ("bi,ij,j->bj", (3, 4), [(4, 2), (2,)]),
    ],
)
def test_einsum_matches_numpy_einsum(equation, x_shape, w_shapes):
    rng = np.random.default_rng(len(equation))
    x = rng.normal(size=x_shape)
    weights = {f"w{i}": rng.normal(size=s) for i, s in enumerate(w_shapes)}
    check(single_node("Einsum", ["x", *weights], x, weights, opset=13, equation=equation), x)


def test_clip_has_the_derivative_of_relu6_at_its_bounds():
    """torch exports nn.ReLU6 / Hardtanh as Clip; their derivative is 0 at a bound (clamp's is 1). MobileNetV2's kernel
    was 2.7e-4 off until Clip took the hardtanh convention (inputs exactly at 0 are common after zero padding)."""
    x = np.array([[-1.0, 0.0, 0.5, 6.0, 7.0]])
    model = single_node("Clip", ["x", "lo", "hi"], x, {"lo": np.array(0.0), "hi": np.array(6.0)}, opset=13)
    point = torch.tensor(x, requires_grad=True)
    converted(model)(point).sum().backward()
    reference = torch.tensor(x, requires_grad=True)
    torch.nn.functional.relu6(reference).sum().backward()
    assert point.grad.tolist() == reference.grad.tolist() == [[0.0, 0.0, 1.0, 0.0, 0.0]]

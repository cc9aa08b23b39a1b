"""Elu … Softsign, HardSigmoid, HardSwish, PRelu as the converter runs them, against onnx's reference evaluator
(float64), with their gradients (finite differences) and the per-point vmap the jacobian kernel uses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import helper

from ntklab.engine.nets.onnx_ops.activations import ACTIVATIONS
from ntklab.engine.nets.onnx_ops.registry import OnnxConversionError
from tests.engine.onnx_ops.reference import (
    assert_forward_mode_matches_reverse,
    assert_gradient_matches_finite_differences,
    assert_matches_reference,
    assert_vmap_per_point_matches,
    converted,
    graph_model,
    single_node,
)

SHAPES = [(3, 4), (2, 3, 4), (2, 3, 2, 2)]


def away_from(x: np.ndarray, kinks: list[float], margin: float = 0.05) -> np.ndarray:
    """x with the values within `margin` of a kink moved 2·margin past it (finite differences across a kink fail)."""
    for kink in kinks:
        x = np.where(np.abs(x - kink) < margin, kink + 2 * margin * np.sign(x - kink + 1e-300), x)
    return x


def check(model, x: np.ndarray, *, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    assert_matches_reference(model, x, rtol=rtol, atol=atol)
    assert_vmap_per_point_matches(model, x)
    assert_gradient_matches_finite_differences(model, x)
    assert_forward_mode_matches_reverse(model, x)


# op, attributes, the kinks of its derivative
CASES = [
    ("Elu", {}, []),
    ("Elu", {"alpha": 0.5}, [0.0]),
    ("Selu", {}, [0.0]),
    ("Selu", {"alpha": 1.5, "gamma": 2.0}, [0.0]),
    ("Celu", {}, []),
    ("Celu", {"alpha": 2.0}, []),
    ("Mish", {}, []),
    ("Softsign", {}, []),
    ("HardSigmoid", {}, [-2.5, 2.5]),
    ("HardSigmoid", {"alpha": 0.25, "beta": 0.375}, [-1.5, 2.5]),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op, attributes, kinks", CASES, ids=[f"{op}-{sorted(a.items())}" for op, a, _ in CASES])
def test_activation_matches_the_reference_gradient_and_vmap(op, attributes, kinks, shape):
    x = away_from(np.random.default_rng([sum(map(ord, op)), *shape]).normal(size=shape) * 3, kinks)
    check(single_node(op, ["x"], x, **attributes), x)


@pytest.mark.parametrize("opset", [14, 21])
@pytest.mark.parametrize("shape", SHAPES)
def test_hard_swish_matches_the_reference_gradient_and_vmap(shape, opset):
    x = away_from(np.random.default_rng([opset, *shape]).normal(size=shape) * 4, [-3.0, 3.0])
    # The reference evaluator runs HardSwish's function body, HardSigmoid with α = 1/6 as a float32 attribute
    # (0.16666667163…); the converter uses 1/6 itself, so they agree to float32's precision only.
    check(single_node("HardSwish", ["x"], x, opset=opset), x, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize(
    "x_shape, slope_shape",
    [
        ((3, 4), (4,)),  # one slope per feature
        ((2, 3, 4, 4), (3, 1, 1)),  # one per channel of an image batch, as exporters write nn.PReLU(C)
        ((2, 3, 4), (3, 1)),
        ((2, 3, 4), (1,)),  # one shared slope (nn.PReLU())
        ((2, 3, 4), (3, 4)),
    ],
)
def test_prelu_broadcasts_its_trainable_slope_to_x(x_shape, slope_shape):
    rng = np.random.default_rng([*x_shape, *slope_shape])
    x = away_from(rng.normal(size=x_shape), [0.0])
    slope = rng.uniform(0.05, 0.5, size=slope_shape)
    model = single_node("PRelu", ["x", "slope"], x, {"slope": slope})
    check(model, x)
    assert [name for name, p in converted(model).named_parameters()] == ["weights.slope"]


@pytest.mark.parametrize("op", ["Elu", "Selu", "Celu", "Mish", "HardSwish", "PRelu", "Softsign", "HardSigmoid"])
def test_activations_are_hidden_representations_and_the_hard_sigmoid_gate_is_not(op):
    x = np.random.default_rng(0).normal(size=(3, 4))
    inputs, initializers = (["x", "slope"], {"slope": np.full(4, 0.1)}) if op == "PRelu" else (["x"], {})
    nodes = [helper.make_node(op, inputs, ["a"]), helper.make_node("Mul", ["a", "w"], ["y"])]
    net = converted(graph_model(nodes, x, {**initializers, "w": np.ones(4)}))
    with torch.no_grad():
        _, hidden = net.forward_with_hidden(torch.as_tensor(x))
    assert (op in ACTIVATIONS) == (op != "HardSigmoid")
    assert len(hidden) == (0 if op == "HardSigmoid" else 1)


def test_an_attribute_the_spec_does_not_give_is_refused_by_name():
    x = np.ones((2, 3))
    with pytest.raises(OnnxConversionError, match="HardSwish attribute alpha is not supported"):
        converted(single_node("HardSwish", ["x"], x, alpha=0.2))

"""LayerNormalization, InstanceNormalization, GroupNormalization (opsets 18 and 21), BatchNormalization against onnx's
reference evaluator (float64), their gradients against finite differences, per-point vmap, and refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto

from ntklab.engine.nets.onnx_ops.registry import OnnxConversionError
from tests.engine.onnx_ops.reference import (
    assert_gradient_matches_finite_differences,
    assert_matches_reference,
    assert_vmap_per_point_matches,
    converted,
    single_node,
)


def dyadic_epsilon(rng) -> float:
    """A random ε that float32 holds exactly and whose shortest decimal is itself: the converter reads a float attribute
    as the shortest decimal of its float32, onnx's reference as the float32, which differ (~1e-8 relative) otherwise."""
    epsilon = 2.0 ** -int(rng.integers(3, 12))
    assert float(str(np.float32(epsilon))) == epsilon
    return epsilon


SHAPES = [(2, 4), (2, 3, 5), (2, 4, 3, 2), (2, 2, 3, 2, 2)]


@pytest.mark.parametrize("seed, shape", list(enumerate(SHAPES)))
def test_layer_normalization_matches_the_reference_for_every_axis(seed, shape):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    for axis in range(-len(shape) + 1, len(shape)):
        normalized = shape[axis % len(shape) :]
        scale_shape = normalized if axis % 2 else normalized[-1:]  # scale broadcast along the normalised axes, too
        inits = {"s": rng.standard_normal(scale_shape), "b": rng.standard_normal(normalized)}
        for inputs in (["x", "s", "b"], ["x", "s"]):
            model = single_node(
                "LayerNormalization",
                inputs,
                x,
                inits if "b" in inputs else {"s": inits["s"]},
                opset=17,
                axis=axis,
                epsilon=dyadic_epsilon(rng),
            )
            assert_matches_reference(model, x)


@pytest.mark.parametrize("seed, shape", list(enumerate(SHAPES[1:], start=10)))
def test_instance_normalization_matches_the_reference(seed, shape):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    inits = {"s": rng.standard_normal(shape[1]), "b": rng.standard_normal(shape[1])}
    model = single_node("InstanceNormalization", ["x", "s", "b"], x, inits, epsilon=dyadic_epsilon(rng))
    assert_matches_reference(model, x)


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize(
    "seed, shape, groups", [(20, (2, 6, 4), 3), (21, (2, 4, 3, 2), 2), (22, (2, 6, 2, 2, 2), 6), (23, (3, 4), 1)]
)
def test_group_normalization_matches_the_reference_with_scale_per_group_at_18_and_per_channel_at_21(
    opset, seed, shape, groups
):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    size = groups if opset < 21 else shape[1]
    inits = {"s": rng.standard_normal(size), "b": rng.standard_normal(size)}
    # stash_type double (opset 21): its default, float32, makes the reference compute the statistics in float32
    extra = {"stash_type": int(TensorProto.DOUBLE)} if opset >= 21 else {}
    model = single_node(
        "GroupNormalization",
        ["x", "s", "b"],
        x,
        inits,
        opset=opset,
        num_groups=groups,
        epsilon=dyadic_epsilon(rng),
        **extra,
    )
    assert_matches_reference(model, x)


def test_group_normalization_with_the_default_float32_stash_matches_to_float32_precision():
    rng = np.random.default_rng(30)
    x = rng.standard_normal((2, 4, 5))
    model = single_node(
        "GroupNormalization",
        ["x", "s", "b"],
        x,
        {"s": rng.standard_normal(4), "b": rng.standard_normal(4)},
        opset=21,
        num_groups=2,
    )
    assert_matches_reference(model, x, rtol=1e-6, atol=1e-6)  # the reference's statistics are float32; ours float64


def test_batch_normalization_matches_the_reference():
    rng = np.random.default_rng(40)
    x = rng.standard_normal((3, 4, 2, 3))
    inits = {
        "s": rng.standard_normal(4),
        "b": rng.standard_normal(4),
        "m": rng.standard_normal(4),
        "v": rng.uniform(0.5, 2, 4),
    }
    for opset in (14, 15):
        for attributes in ({}, {"epsilon": 2.0**-10, "momentum": 0.8}):
            assert_matches_reference(
                single_node("BatchNormalization", ["x", "s", "b", "m", "v"], x, inits, opset=opset, **attributes), x
            )
    # BatchNormalization-9 (opsets 9-13) is inference when it has one output; onnx's reference then uses the batch's statistics
    model = single_node("BatchNormalization", ["x", "s", "b", "m", "v"], x, inits, opset=11, epsilon=1e-3)
    channel = (1, -1, 1, 1)
    expected = (
        (x - inits["m"].reshape(channel)) / np.sqrt(inits["v"].reshape(channel) + 1e-3) * inits["s"].reshape(channel)
    )
    np.testing.assert_allclose(
        converted(model)(torch.as_tensor(x)).detach().numpy(),
        expected + inits["b"].reshape(channel),
        rtol=1e-12,
        atol=1e-12,
    )
    assert [name for name, _ in converted(model).named_parameters()] == ["weights.s", "weights.b"]


NODES = {
    "LayerNormalization": lambda rng, x: single_node(
        "LayerNormalization",
        ["x", "s", "b"],
        x,
        {"s": rng.standard_normal(x.shape[2:]), "b": rng.standard_normal(x.shape[2:])},
        axis=2,
    ),
    "InstanceNormalization": lambda rng, x: single_node(
        "InstanceNormalization",
        ["x", "s", "b"],
        x,
        {"s": rng.standard_normal(x.shape[1]), "b": rng.standard_normal(x.shape[1])},
    ),
    "GroupNormalization-18": lambda rng, x: single_node(
        "GroupNormalization",
        ["x", "s", "b"],
        x,
        {"s": rng.standard_normal(2), "b": rng.standard_normal(2)},
        opset=18,
        num_groups=2,
    ),
    "GroupNormalization-21": lambda rng, x: single_node(
        "GroupNormalization",
        ["x", "s", "b"],
        x,
        {"s": rng.standard_normal(4), "b": rng.standard_normal(4)},
        opset=21,
        num_groups=2,
    ),
    "BatchNormalization": lambda rng, x: single_node(
        "BatchNormalization",
        ["x", "s", "b", "m", "v"],
        x,
        {
            "s": rng.standard_normal(4),
            "b": rng.standard_normal(4),
            "m": rng.standard_normal(4),
            "v": rng.uniform(0.5, 2, 4),
        },
    ),
}


@pytest.mark.parametrize("name", NODES)
def test_normalization_gradient_and_per_point_vmap(name):
    rng = np.random.default_rng(50)
    x = rng.standard_normal((2, 4, 3))
    model = NODES[name](rng, x)
    assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


def test_extra_outputs_and_training_mode_are_refused():
    rng = np.random.default_rng(60)
    x = rng.standard_normal((2, 4))
    model = single_node(
        "LayerNormalization", ["x", "s"], x, {"s": rng.standard_normal(4)}, outputs=("y", "mean", "inv_std")
    )
    model.graph.output[0].name = "inv_std"
    with pytest.raises(OnnxConversionError, match="LayerNormalization: only its first 1 output"):
        converted(model)
    inits = {"s": np.ones(4), "b": np.zeros(4), "m": np.zeros(4), "v": np.ones(4)}
    with pytest.raises(OnnxConversionError, match="training_mode=1 is not supported"):
        converted(single_node("BatchNormalization", ["x", "s", "b", "m", "v"], x, inits, training_mode=1))
    model = single_node(
        "BatchNormalization",
        ["x", "s", "b", "m", "v"],
        x,
        inits,
        opset=15,
        outputs=("y", "running_mean", "running_var"),
    )
    model.graph.output[0].name = "running_mean"
    with pytest.raises(OnnxConversionError, match="BatchNormalization: only its first 1 output"):
        converted(model)

"""Split, Expand, Tile, ConstantOfShape, Range and Reshape as the converter runs them, against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from ntklab.engine.nets.onnx_ops.registry import OnnxConversionError
from tests.engine.onnx_ops.reference import (
    assert_gradient_matches_finite_differences,
    assert_matches_reference,
    assert_vmap_per_point_matches,
    converted,
    graph_model,
    single_node,
)


def generator(seed: int) -> np.random.Generator:
    return np.random.default_rng(1000 + seed)


# ---- Split


def split_model(x: np.ndarray, axis: int, pieces: int, sizes: list[int] | None, how: str, opset: int):
    """Split x into `pieces` outputs, then Concat them in reverse order (every piece's size and content shows)."""
    outputs = [f"p{i}" for i in range(pieces)]
    inputs, initializers, attributes = ["x"], {}, {"axis": axis}
    if how == "attribute":
        attributes["split"] = sizes
    elif how == "input":
        inputs.append("sizes")
        initializers["sizes"] = np.array(sizes, dtype=np.int64)
    elif how == "num_outputs":
        attributes["num_outputs"] = pieces
    nodes = [
        helper.make_node("Split", inputs, outputs, **attributes),
        helper.make_node("Concat", outputs[::-1], ["y"], axis=axis),
    ]
    return graph_model(nodes, x, initializers, opset=opset)


SPLIT_CASES = [
    (opset, how, seed)
    for opset, how in [
        (11, "attribute"),
        (11, "equal"),
        (13, "input"),
        (13, "equal"),
        (18, "input"),
        (18, "num_outputs"),
    ]
    for seed in range(3)
]


@pytest.mark.parametrize("opset, how, seed", SPLIT_CASES)
def test_split_with_and_without_sizes_matches_the_reference(opset, how, seed):
    rng = generator(seed)
    shape = [3, *rng.integers(2, 7, size=rng.integers(1, 3))]
    axis = int(rng.integers(1, len(shape)))
    axis = axis - len(shape) if seed == 1 else axis  # a negative axis too
    length = shape[axis]
    valid = [k for k in range(2, length + 1) if -(-length // k) * (k - 1) < length]  # every piece non-empty
    pieces = int(rng.choice(valid))
    cuts = (
        np.sort(rng.choice(np.arange(1, length), size=pieces - 1, replace=False))
        if how in ("attribute", "input")
        else None
    )
    sizes = None if cuts is None else [int(s) for s in np.diff([0, *cuts, length])]
    if how in ("equal", "num_outputs") and seed == 2:
        pieces = 3
        shape[axis] = 7  # uneven: pieces of ⌈7/3⌉ = 3, the last smaller
    x = rng.normal(size=shape)
    assert_matches_reference(split_model(x, axis, pieces, sizes, how, opset), x)


def test_split_is_differentiable_and_per_point():
    x = generator(0).normal(size=(3, 5, 2))
    model = split_model(x, 1, 3, [1, 3, 1], "input", 18)
    assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


def test_split_last_output_alone_is_the_last_piece():
    x = generator(1).normal(size=(2, 6))
    model = single_node("Split", ["x"], x, opset=18, outputs=("a", "b", "c"), axis=1, num_outputs=3)
    model.graph.output[0].name = "c"
    assert_matches_reference(model, x)


# ---- Expand


def expand_to_shape_of_x(x: np.ndarray, middle: int) -> object:
    """y = Expand(x [n, 1, k], Concat(Shape(x)[0:1], [middle], Shape(x)[2:])): the target computed at run time."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["batch"]),
        helper.make_node("Slice", ["s", "two", "big"], ["rest"]),
        helper.make_node("Concat", ["batch", "middle", "rest"], ["target"], axis=0),
        helper.make_node("Expand", ["x", "target"], ["y"]),
    ]
    initializers = {
        "zero": np.array([0]),
        "one": np.array([1]),
        "two": np.array([2]),
        "big": np.array([2**63 - 1]),
        "middle": np.array([middle]),
    }
    return graph_model(nodes, x, initializers)


@pytest.mark.parametrize("seed", range(3))
def test_expand_to_a_shape_computed_from_shape_of_x_at_run_time(seed):
    rng = generator(seed)
    x = rng.normal(size=(3, 1, int(rng.integers(1, 4))))
    model = expand_to_shape_of_x(x, int(rng.integers(2, 5)))
    assert_matches_reference(model, x)
    assert converted(model).steps[-1].op == "Expand"  # not folded: the target is known only at run time
    assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


@pytest.mark.parametrize("seed", range(6))
def test_expand_to_a_constant_shape_broadcasts_both_ways(seed):
    rng = generator(seed)
    shape = [3, *rng.integers(1, 4, size=rng.integers(1, 3))]
    x = rng.normal(size=shape)
    target = [int(rng.choice([1, d])) if d > 1 else int(rng.integers(1, 4)) for d in shape[1:]]
    target = [1] + target if seed % 2 else [int(rng.integers(1, 3)), 1, *target]  # equal rank, or a longer target
    assert_matches_reference(single_node("Expand", ["x", "shape"], x, {"shape": np.array(target)}), x)


def test_expand_of_a_weight_is_differentiable_in_it():
    x = generator(2).normal(size=(3, 4))
    model = graph_model(
        [helper.make_node("Expand", ["w", "shape"], ["e"]), helper.make_node("Mul", ["x", "e"], ["y"])],
        x,
        {"w": generator(3).normal(size=(1, 4)), "shape": np.array([3, 1])},
    )
    assert_matches_reference(model, x)
    assert_gradient_matches_finite_differences(model, x)


# ---- Tile


@pytest.mark.parametrize("seed", range(4))
def test_tile_matches_the_reference(seed):
    rng = generator(seed)
    x = rng.normal(size=[3, *rng.integers(1, 4, size=rng.integers(1, 3))])
    repeats = np.array([1 if seed % 2 else 2, *rng.integers(1, 4, size=x.ndim - 1)])
    model = single_node("Tile", ["x", "repeats"], x, {"repeats": repeats})
    assert_matches_reference(model, x)
    if repeats[0] == 1:
        assert_gradient_matches_finite_differences(model, x)
        assert_vmap_per_point_matches(model, x)


# ---- ConstantOfShape


@pytest.mark.parametrize("value", [None, np.array([2.5]), np.array([7], dtype=np.int64), np.array([True])])
def test_constant_of_shape_of_a_run_time_shape_takes_value_and_its_type(value):
    x = generator(0).normal(size=(3, 2, 4))
    attributes = {} if value is None else {"value": numpy_helper.from_array(value)}
    model = graph_model(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["y"], **attributes)], x
    )
    assert_matches_reference(model, x)
    got = converted(model)(torch.as_tensor(x))
    assert (
        str(got.dtype)
        == {None: "torch.float64", 2.5: "torch.float64", 7: "torch.int64", True: "torch.bool"}[
            None if value is None else value.reshape(-1)[0].item()
        ]
    )


def test_constant_of_shape_in_a_sum_with_x_is_per_point():
    x = generator(1).normal(size=(3, 2))
    model = graph_model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.array([0.5]))),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        x,
    )
    assert_matches_reference(model, x)
    assert_vmap_per_point_matches(model, x)


def test_constant_of_shape_refuses_a_value_of_several_elements():
    x = np.zeros((2, 2))
    model = graph_model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(np.array([1.0, 2.0]))),
        ],
        x,
    )
    with pytest.raises(OnnxConversionError, match="ConstantOfShape: value must hold one element"):
        converted(model)


# ---- Range


RANGES = [
    (0, 5, 1),
    (2, 11, 3),
    (10, 1, -2),
    (3, 3, 1),
    (5, 1, 1),
    (-4, 4, 3),
    (0.5, 3.7, 0.4),
    (1.0, -2.0, -0.75),
    (0.0, 1.0, 0.1),
    (2.0, 1.0, 0.5),
]


@pytest.mark.parametrize("start, limit, delta", RANGES)
def test_range_of_constants_int_and_float(start, limit, delta):
    dtype = np.float64 if isinstance(start, float) else np.int64
    x = np.zeros((2, 1))
    model = single_node(
        "Range",
        ["start", "limit", "delta"],
        x,
        {
            "start": np.array(start, dtype=dtype),
            "limit": np.array(limit, dtype=dtype),
            "delta": np.array(delta, dtype=dtype),
        },
    )
    assert_matches_reference(model, x)


@pytest.mark.parametrize("kind", ["int", "float"])
def test_range_up_to_a_dimension_of_x_at_run_time(kind):
    x = generator(2).normal(size=(3, 5))
    dtype = np.int64 if kind == "int" else np.float64
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["length"], axis=0)]
    if kind == "float":
        nodes.append(helper.make_node("Cast", ["length"], ["limit"], to=TensorProto.DOUBLE))
    nodes += [
        helper.make_node("Range", ["start", "limit" if kind == "float" else "length", "delta"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.DOUBLE),
        helper.make_node("Mul", ["x", "rf"], ["y"]),
    ]
    start, delta = (
        (np.array(0, dtype=dtype), np.array(1, dtype=dtype)) if kind == "int" else (np.array(0.5), np.array(1.0))
    )
    model = graph_model(nodes, x, {"one": np.array(1), "start": start, "delta": delta})
    assert_matches_reference(model, x)
    assert_vmap_per_point_matches(model, x)


# ---- Reshape


@pytest.mark.parametrize("target, allowzero", [([0, -1], 0), ([-1, 2, 0], 0), ([3, 0, 4], 1)])
def test_reshape_to_a_constant_target(target, allowzero):
    x = generator(3).normal(size=(3, 2, 4)) if target[1] != 0 or allowzero == 0 else generator(3).normal(size=(3, 0, 4))
    model = single_node("Reshape", ["x", "shape"], x, {"shape": np.array(target)}, allowzero=allowzero)
    assert_matches_reference(model, x)


def test_reshape_is_per_point_and_differentiable():
    x = generator(4).normal(size=(3, 2, 3))
    model = single_node("Reshape", ["x", "shape"], x, {"shape": np.array([0, 3, -1])})
    assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


@pytest.mark.parametrize("like", [np.array([1.0], dtype=np.float32), np.array([1], dtype=np.int64)])
def test_castlike_takes_the_target_type_and_a_float_target_is_the_networks_dtype(like):
    x = np.array([[1.7, -2.2, 3.0]])
    model = graph_model(
        [
            helper.make_node("CastLike", ["x", "like"], ["c"]),
            helper.make_node("Cast", ["c"], ["y"], to=TensorProto.DOUBLE),
        ],
        x,
        {"like": like},
    )
    expected = x.astype(like.dtype).astype(np.float64)  # float32 target: the converter keeps float64 (exact here)
    with torch.no_grad():
        got = converted(model)(torch.as_tensor(x)).numpy()
    np.testing.assert_array_equal(got, np.trunc(x) if like.dtype.kind == "i" else x)
    np.testing.assert_allclose(got, expected, rtol=1e-7)

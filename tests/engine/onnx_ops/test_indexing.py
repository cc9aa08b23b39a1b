"""Gather, GatherElements, Slice, ScatterND, Trilu, Pad and Resize as the converter runs them, against onnx's reference
evaluator; their gradients by finite differences and their per-point (vmap) runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from onnx import helper, numpy_helper

from ntklab.engine.nets.onnx_ops.registry import OnnxConversionError
from tests.engine.onnx_ops.reference import (
    assert_gradient_matches_finite_differences,
    assert_matches_reference,
    assert_vmap_per_point_matches,
    converted,
    graph_model,
    single_node,
)

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def generator(seed: int) -> np.random.Generator:
    return np.random.default_rng(2000 + seed)


def constant(name: str, value: np.ndarray):
    """A Constant node (a float array that stays a constant, unlike a float initializer, which is a weight)."""
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))


# ---- Gather


@pytest.mark.parametrize("seed", range(4))
def test_gather_with_negative_axis_and_negative_or_scalar_indices(seed):
    rng = generator(seed)
    x = rng.normal(size=[3, *rng.integers(1, 5, size=2)])
    axis = int(rng.integers(-3, 3))
    size = x.shape[axis]
    indices = np.array(int(rng.integers(-size, size))) if seed % 2 else rng.integers(-size, size, size=(2, 3))
    assert_matches_reference(single_node("Gather", ["x", "i"], x, {"i": indices}, axis=axis), x)


# ---- GatherElements


@pytest.mark.parametrize("seed", range(8))
def test_gather_elements_with_negative_axis_and_indices(seed):
    rng = generator(seed)
    shape = [3, *rng.integers(1, 5, size=rng.integers(1, 3))]
    axis = int(rng.integers(-len(shape), len(shape)))
    index_shape = list(shape)
    index_shape[axis] = int(rng.integers(1, 5))
    x = rng.normal(size=shape)
    indices = rng.integers(-shape[axis], shape[axis], size=index_shape)
    assert_matches_reference(single_node("GatherElements", ["x", "i"], x, {"i": indices}, axis=axis), x)


def test_gather_elements_is_differentiable_and_per_point_with_indices_expanded_to_the_batch():
    """Indices [1, 4, 2] expanded at run time to [n, 4, 2] (Shape(x)), then GatherElements on axis 1 of x [n, 3, 2]."""
    rng = generator(0)
    x = rng.normal(size=(3, 3, 2))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["batch"]),
        helper.make_node("Concat", ["batch", "rest"], ["target"], axis=0),
        helper.make_node("Expand", ["i", "target"], ["ie"]),
        helper.make_node("GatherElements", ["x", "ie"], ["y"], axis=-2),
    ]
    model = graph_model(
        nodes,
        x,
        {
            "zero": np.array([0]),
            "one": np.array([1]),
            "rest": np.array([4, 2]),
            "i": rng.integers(-3, 3, size=(1, 4, 2)),
        },
    )
    assert_matches_reference(model, x)
    assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


# ---- Slice


def random_slice(
    rng, shape: list[int], first_axis: int = 0, *, default_axes: bool = False, default_steps: bool = False
):
    """starts, ends, axes, steps of a random slice, mostly non-empty: bounds written as an index, counted from the
    end, or out of range (±INT64 as exporters write "to the end"), sometimes reversed (an empty result)."""
    rank = len(shape)
    count = int(rng.integers(1, rank - first_axis + 1))
    axes = np.arange(count) if default_axes else rng.choice(np.arange(first_axis, rank), size=count, replace=False)
    starts, ends = [], []
    steps = np.ones(count, dtype=np.int64) if default_steps else rng.choice([-3, -2, -1, 1, 2, 3], size=count)
    reversed_axis = int(rng.integers(0, 5 * count))  # an axis in [0, count) is reversed: one case in five is empty
    for i, (axis, step) in enumerate(zip(axes, steps)):
        d = shape[axis]
        begin = int(rng.integers(0, d))
        end = int(rng.integers(begin + 1, d + 1)) if step > 0 else int(rng.integers(-1, begin))
        if i == reversed_axis:
            begin, end = end, begin
        # out of range, clamping to begin (a start below −d stepping back is left to the test below: numpy differs)
        clamped = -d - 2 if begin == 0 and step > 0 else d + 3 if begin == d - 1 and step < 0 else begin
        starts.append(int(rng.choice([begin, begin - d, clamped])))
        if end == d:
            ends.append(int(rng.choice([d, d + 2, INT64_MAX])))
        elif end == -1:
            ends.append(int(rng.choice([-d - 1, -d - 5, INT64_MIN])))
        else:
            ends.append(int(rng.choice([end, end - d])))
    axes = [int(a) - rank if rng.random() < 0.5 else int(a) for a in axes]  # negative axes too
    return np.array(starts), np.array(ends), np.array(axes), steps.astype(np.int64)


@pytest.mark.parametrize("seed, inputs", list(itertools.product(range(8), ["all", "axes", "none"])))
def test_slice_with_negative_axes_and_steps_and_huge_ends(seed, inputs):
    rng = generator(seed)
    shape = [3, *rng.integers(1, 6, size=rng.integers(1, 4))]
    starts, ends, axes, steps = random_slice(rng, shape, default_axes=inputs == "none", default_steps=inputs != "all")
    x = rng.normal(size=shape)
    if inputs == "none":  # axes default to 0, 1, …; steps to 1
        model = single_node("Slice", ["x", "b", "e"], x, {"b": starts, "e": ends}, opset=11)
    elif inputs == "axes":
        model = single_node("Slice", ["x", "b", "e", "a"], x, {"b": starts, "e": ends, "a": axes}, opset=13)
    else:
        model = single_node("Slice", ["x", "b", "e", "a", "s"], x, {"b": starts, "e": ends, "a": axes, "s": steps})
    assert_matches_reference(model, x)


@pytest.mark.parametrize("seed", range(3))
def test_slice_is_differentiable_and_per_point(seed):
    rng = generator(seed)
    shape = [3, *rng.integers(2, 5, size=2)]
    starts, ends, axes, steps = random_slice(rng, shape, first_axis=1)
    x = rng.normal(size=shape)
    model = single_node("Slice", ["x", "b", "e", "a", "s"], x, {"b": starts, "e": ends, "a": axes, "s": steps})
    assert_matches_reference(model, x)
    if converted(model)(torch.as_tensor(x)).numel():
        assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


def test_slice_backwards_from_a_start_below_minus_the_dimension_clamps_to_zero_as_the_spec_says():
    """starts −5 on a dimension of 3 stepping −1: the spec clamps start + 3 = −2 to 0 and end −4 + 3 = −1 to −1, so
    one element, x[:, 0:1]; numpy's x[:, -5:-4:-1] (the reference evaluator) is empty."""
    x = generator(0).normal(size=(2, 3))
    model = single_node(
        "Slice",
        ["x", "b", "e", "a", "s"],
        x,
        {"b": np.array([-5]), "e": np.array([-4]), "a": np.array([1]), "s": np.array([-1])},
    )
    np.testing.assert_array_equal(converted(model)(torch.as_tensor(x)).numpy(), x[:, 0:1])


def test_slice_with_ends_from_shape_of_x_at_run_time():
    """x[:, 1 : dim(2) − 1 : 1, ::-1 from dim(2)] with the bounds computed from Shape(x)."""
    x = generator(0).normal(size=(3, 4, 5))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "one", "three"], ["dims"]),
        helper.make_node("Sub", ["dims", "one_one"], ["ends"]),
        helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"]),
    ]
    model = graph_model(
        nodes,
        x,
        {
            "one": np.array([1]),
            "three": np.array([3]),
            "one_one": np.array([1, 1]),
            "starts": np.array([1, -1]),
            "axes": np.array([1, 2]),
            "steps": np.array([1, -2]),
        },
    )
    assert_matches_reference(model, x)
    assert converted(model).steps[-1].op == "Slice"
    assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


# ---- ScatterND


def random_scatter(rng, shape: list[int], reduction: str, first_axis: int = 0):
    depth = int(rng.integers(1, len(shape) - first_axis + 1))
    leading = shape[first_axis : first_axis + depth]
    tuples = list(itertools.product(*[range(d) for d in leading]))
    count = int(rng.integers(1, len(tuples) + 1))
    picked = [tuples[i] for i in rng.choice(len(tuples), size=count, replace=reduction != "none")]
    indices = np.array(
        [[c - d if rng.random() < 0.3 else c for c, d in zip(t, leading)] for t in picked]
    )  # negative too
    indices = indices.reshape(count, depth) if count % 2 else indices.reshape(1, count, depth)
    updates = rng.normal(size=(*indices.shape[:-1], *shape[first_axis + depth :]))
    return indices, updates


REDUCTIONS = ["none", "add", "mul", "max", "min"]


@pytest.mark.parametrize("reduction, seed", list(itertools.product(REDUCTIONS, range(4))))
def test_scatter_nd_each_reduction_matches_the_reference(reduction, seed):
    rng = generator(seed)
    shape = [3, *rng.integers(1, 4, size=rng.integers(0, 3))]
    x = rng.normal(size=shape)
    indices, updates = random_scatter(rng, shape, reduction)
    attributes = {} if reduction == "none" else {"reduction": reduction}
    model = single_node("ScatterND", ["x", "i", "u"], x, {"i": indices, "u": updates}, **attributes)
    assert_matches_reference(model, x)
    assert_gradient_matches_finite_differences(model, x)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_is_per_point_on_a_transposed_batch(reduction):
    """y = Transpose(ScatterND(Transpose(x), indices, 2·x[:, :2]ᵀ)): the indices address axis 1 of x, as exporters write x[:, i] = v."""
    x = generator(5).normal(size=(3, 4, 2))
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Slice", ["t", "zero", "two"], ["part"]),
        helper.make_node("Mul", ["part", "two_f"], ["u"]),
        helper.make_node(
            "ScatterND", ["t", "i", "u"], ["s"], **({} if reduction == "none" else {"reduction": reduction})
        ),
        helper.make_node("Transpose", ["s"], ["y"], perm=[1, 0, 2]),
    ]
    indices = np.array([[3], [-3]]) if reduction == "none" else np.array([[3], [3]])
    model = graph_model(nodes, x, {"zero": np.array([0]), "two": np.array([2]), "two_f": np.array(2.0), "i": indices})
    assert_matches_reference(model, x)
    assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_hessian_vector_products_run_per_point(reduction):
    """vmap over points of forward-over-reverse and reverse-over-reverse Hessian-vector products in trainable updates
    (as ntklab.engine.curvature.operators.model_hessian_operator runs them): no value read of a batched tensor in any derivative, and both agree."""
    x = generator(6).normal(size=(3, 4, 2))
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Slice", ["t", "zero", "two"], ["part"]),
        helper.make_node("Mul", ["part", "w"], ["u"]),
        helper.make_node(
            "ScatterND", ["t", "i", "u"], ["s"], **({} if reduction == "none" else {"reduction": reduction})
        ),
        helper.make_node("Transpose", ["s"], ["y"], perm=[1, 0, 2]),
    ]
    indices = np.array([[3], [-3]]) if reduction == "none" else np.array([[3], [3]])
    net = converted(
        graph_model(
            nodes,
            x,
            {"w": generator(7).normal(size=(2, 1, 2)), "i": indices, "zero": np.array([0]), "two": np.array([2])},
        )
    )
    weights = {name: p.detach() for name, p in net.named_parameters()}
    vector = {name: torch.randn_like(p) for name, p in weights.items()}

    def gradient(w, x_i):
        return torch.func.grad(lambda v: torch.func.functional_call(net, v, (x_i[None],)).pow(2).sum())(w)

    forward = torch.func.vmap(lambda x_i: torch.func.jvp(lambda w: gradient(w, x_i), (weights,), (vector,))[1])(
        torch.as_tensor(x)
    )
    reverse = torch.func.vmap(lambda x_i: torch.func.vjp(lambda w: gradient(w, x_i), weights)[1](vector)[0])(
        torch.as_tensor(x)
    )
    torch.testing.assert_close(forward, reverse, rtol=1e-10, atol=1e-12)


# ---- Trilu


@pytest.mark.parametrize("upper, k, seed", list(itertools.product([0, 1], [None, -2, 0, 1, 3], range(2))))
def test_trilu_upper_and_lower_from_diagonal_k(upper, k, seed):
    rng = generator(seed)
    x = rng.normal(size=(3, *rng.integers(1, 5, size=2)))
    inputs, initializers = (["x"], {}) if k is None else (["x", "k"], {"k": np.array(k)})
    model = single_node("Trilu", inputs, x, initializers, upper=upper)
    assert_matches_reference(model, x)
    if seed == 0:
        assert_gradient_matches_finite_differences(model, x)
        assert_vmap_per_point_matches(model, x)


# ---- Pad


def random_pads(rng, shape, axes, low, high):
    return np.concatenate([rng.integers(low, high + 1, size=len(axes)), rng.integers(low, high + 1, size=len(axes))])


PAD_CASES = [
    (mode, opset, seed)
    for mode, opset in [
        ("constant", 11),
        ("constant", 18),
        ("reflect", 13),
        ("reflect", 18),
        ("edge", 11),
        ("edge", 18),
        ("wrap", 19),
    ]
    for seed in range(3)
]


@pytest.mark.parametrize("mode, opset, seed", PAD_CASES)
def test_pad_each_mode_matches_the_reference(mode, opset, seed):
    rng = generator(seed)
    shape = [3, *rng.integers(2, 5, size=rng.integers(1, 3))]
    x = rng.normal(size=shape)
    axes = (
        list(range(len(shape)))
        if opset < 18 or seed == 0
        else [int(a) - len(shape) * (seed % 2) for a in rng.choice(len(shape), size=2, replace=False)]
    )
    high = 2 * min(shape) if mode != "constant" else 3  # reflect / wrap further than a whole period
    pads = random_pads(rng, shape, axes, 0, high)
    inputs, initializers = ["x", "pads"], {"pads": pads}
    if mode == "constant" and seed:
        inputs.append("value")
        initializers["value"] = np.array(rng.normal())
    if axes != list(range(len(shape))):
        inputs += [""] * (3 - len(inputs)) + ["axes"]
        initializers["axes"] = np.array(axes)
    model = single_node("Pad", inputs, x, initializers, opset=opset, mode=mode)
    assert_matches_reference(model, x)


def crop_then_pad(x: np.ndarray, pads: np.ndarray, mode: str, value: float = 0.0) -> np.ndarray:
    """The expected Pad with negative pads (numpy's pad refuses them): crop the negative ends, then pad the positive ones."""
    rank = x.ndim
    crop = tuple(
        slice(max(-int(b), 0), x.shape[i] - max(-int(e), 0)) for i, (b, e) in enumerate(zip(pads[:rank], pads[rank:]))
    )
    widths = [(max(int(b), 0), max(int(e), 0)) for b, e in zip(pads[:rank], pads[rank:])]
    extra = {"constant_values": value} if mode == "constant" else {}
    return np.pad(x[crop], widths, mode=mode, **extra)


@pytest.mark.parametrize("mode, seed", list(itertools.product(["constant", "reflect", "edge", "wrap"], range(3))))
def test_pad_with_negative_pads_crops_first(mode, seed):
    rng = generator(seed)
    x = rng.normal(size=(3, *rng.integers(4, 7, size=2)))
    pads = np.array([0, *rng.integers(-2, 3, size=2), 0, *rng.integers(-2, 3, size=2)])
    pads[1] = -1 - seed % 2  # at least one crop
    model = single_node("Pad", ["x", "pads", "value"], x, {"pads": pads, "value": np.array(0.25)}, opset=19, mode=mode)
    got = converted(model)(torch.as_tensor(x)).detach().numpy()
    np.testing.assert_allclose(got, crop_then_pad(x, pads, mode, 0.25), rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_is_differentiable_and_per_point(mode):
    x = generator(7).normal(size=(3, 3, 4))
    model = single_node("Pad", ["x", "pads"], x, {"pads": np.array([0, 2, -1, 0, -1, 3])}, opset=19, mode=mode)
    assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


def test_pad_with_a_trainable_constant_value_is_differentiable_in_it():
    x = generator(8).normal(size=(3, 2))
    model = single_node("Pad", ["x", "pads", "value"], x, {"pads": np.array([0, 1, 0, 2]), "value": np.array([0.7])})
    assert_matches_reference(model, x)
    assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


# ---- Resize


COORDINATES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"]
MODES = [
    ("nearest", "round_prefer_floor"),
    ("nearest", "round_prefer_ceil"),
    ("nearest", "floor"),
    ("nearest", "ceil"),
    ("linear", None),
]
RESIZE_CASES = [
    (mode, nearest, coordinates, via)
    for (mode, nearest), coordinates, via in itertools.product(MODES, COORDINATES, ["scales", "sizes"])
]


def resize_model(
    x: np.ndarray,
    mode: str,
    nearest: str | None,
    coordinates: str,
    *,
    scales=None,
    sizes=None,
    axes=None,
    opset: int = 13,
):
    """Resize(x, roi, scales, sizes) with scales as a Constant node (a float initializer would be a weight)."""
    attributes = {"mode": mode, "coordinate_transformation_mode": coordinates}
    if nearest is not None:
        attributes["nearest_mode"] = nearest
    if axes is not None:
        attributes["axes"] = axes
    nodes, initializers = [], {}
    if opset < 13:  # roi and scales are required inputs, empty when unused
        nodes += [
            constant("roi", np.zeros(0, dtype=np.float32)),
            constant("scales", np.asarray(scales if scales is not None else [], dtype=np.float32)),
        ]
        inputs = ["x", "roi", "scales"]
    else:
        if scales is not None:
            nodes.append(constant("scales", np.asarray(scales, dtype=np.float32)))
        inputs = ["x", "", "scales" if scales is not None else ""]
    if sizes is not None:
        inputs.append("sizes")
        initializers["sizes"] = np.asarray(sizes, dtype=np.int64)
    nodes.append(helper.make_node("Resize", inputs, ["y"], **attributes))
    return graph_model(nodes, x, initializers, opset=opset)


@pytest.mark.parametrize("mode, nearest, coordinates, via", RESIZE_CASES)
def test_resize_nearest_and_linear_in_each_coordinate_mode(mode, nearest, coordinates, via):
    rng = generator(RESIZE_CASES.index((mode, nearest, coordinates, via)))
    spatial = int(rng.integers(1, 4))
    opset = 19 if coordinates == "half_pixel_symmetric" else int(rng.choice([11, 13, 18]))
    if via == "scales":
        dims = [
            int(d) for d in rng.choice([2, 4, 6], size=spatial)
        ]  # s·n whole for every scale (align_corners reads ⌊s·n⌋)
        factors = [float(f) for f in rng.choice([0.5, 1.0, 1.5, 2.0, 2.5, 3.0], size=spatial)]
        x = rng.normal(size=(2, 2, *dims))
        model = resize_model(x, mode, nearest, coordinates, scales=[1.0, 1.0, *factors], opset=opset)
    else:
        dims = [int(d) for d in rng.integers(1, 6, size=spatial)]
        targets = [int(rng.integers(1, 2 * d + 3)) for d in dims]
        x = rng.normal(size=(2, 2, *dims))
        model = resize_model(x, mode, nearest, coordinates, sizes=[2, 2, *targets], opset=opset)
    assert_matches_reference(model, x)


@pytest.mark.parametrize(
    "mode, nearest, coordinates",
    [
        ("linear", None, "half_pixel"),
        ("linear", None, "align_corners"),
        ("nearest", "round_prefer_floor", "asymmetric"),
    ],
)
def test_resize_over_axes_is_differentiable_and_per_point(mode, nearest, coordinates):
    x = generator(9).normal(size=(3, 2, 3, 2))
    by_sizes = resize_model(x, mode, nearest, coordinates, sizes=[5, 3], axes=[2, 3], opset=18)
    by_scales = resize_model(x, mode, nearest, coordinates, scales=[1.0, 1.0, 2.0, 1.5], opset=13)
    for model in (by_sizes, by_scales):
        assert_matches_reference(model, x)
        assert_vmap_per_point_matches(model, x)
    assert_gradient_matches_finite_differences(by_sizes, x)
    negative_axes = resize_model(
        x, mode, nearest, coordinates, sizes=[5, 3], axes=[-2, -1], opset=18
    )  # the reference reads only axes ≥ 0
    torch.testing.assert_close(
        converted(negative_axes)(torch.as_tensor(x)), converted(by_sizes)(torch.as_tensor(x)), rtol=0, atol=0
    )


def test_resize_with_scales_known_only_at_run_time():
    """Scales as a float initializer (a weight of the converted network): read at run time."""
    x = generator(10).normal(size=(2, 1, 3))
    model = graph_model(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
        x,
        {"scales": np.array([1.0, 1.0, 1.5], dtype=np.float32)},
    )
    assert_matches_reference(model, x)
    assert_vmap_per_point_matches(model, x)


# ---- refused attribute values


REFUSED = [
    (lambda x: resize_model(x, "cubic", None, "half_pixel", scales=[1, 1, 2]), "Resize: mode=cubic"),
    (
        lambda x: resize_model(x, "linear", None, "tf_crop_and_resize", scales=[1, 1, 2]),
        "Resize: coordinate_transformation_mode=tf_crop_and_resize",
    ),
    (
        lambda x: resize_model(x, "nearest", None, "tf_half_pixel_for_nn", scales=[1, 1, 2], opset=11),
        "coordinate_transformation_mode=tf_half_pixel_for_nn",
    ),
    (
        lambda x: resize_model(x, "linear", None, "half_pixel_symmetric", scales=[1, 1, 2], opset=18),
        "coordinate_transformation_mode=half_pixel_symmetric",
    ),
    (
        lambda x: graph_model(
            [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], antialias=1)], x, {"sizes": np.array([2, 1, 6])}
        ),
        "Resize: antialias=1",
    ),
    (
        lambda x: graph_model(
            [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], exclude_outside=1)],
            x,
            {"sizes": np.array([2, 1, 6])},
        ),
        "Resize: exclude_outside=1",
    ),
    (
        lambda x: graph_model(
            [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], keep_aspect_ratio_policy="not_larger")],
            x,
            {"sizes": np.array([2, 1, 6])},
        ),
        "keep_aspect_ratio_policy=not_larger",
    ),
    (
        lambda x: graph_model(
            [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], nearest_mode="nearest")],
            x,
            {"sizes": np.array([2, 1, 6])},
        ),
        "nearest_mode=nearest",
    ),
    (
        lambda x: single_node("Pad", ["x", "pads"], x, {"pads": np.array([0, 0, 1, 0, 0, 1])}, mode="wrap"),
        "Pad: mode=wrap",
    ),
    (
        lambda x: single_node("Pad", ["x", "pads"], x, {"pads": np.array([0, 0, 1, 0, 0, 1])}, opset=19, mode="mirror"),
        "Pad: mode=mirror",
    ),
    (
        lambda x: single_node(
            "ScatterND", ["x", "i", "u"], x, {"i": np.array([[0]]), "u": np.ones((1, 1, 3))}, reduction="prod"
        ),
        "ScatterND: reduction=prod",
    ),
    (lambda x: single_node("Slice", ["x"], x, starts=[0], ends=[1]), "Slice attribute ends, starts is not supported"),
    (
        lambda x: single_node(
            "Slice",
            ["x", "b", "e", "a", "s"],
            x,
            {"b": np.array([0]), "e": np.array([2]), "a": np.array([2]), "s": np.array([0])},
        ),
        "Slice: a step of 0",
    ),
]


@pytest.mark.parametrize("build, message", REFUSED, ids=[message for _, message in REFUSED])
def test_an_unsupported_attribute_value_is_refused_by_name(build, message):
    x = np.zeros((2, 1, 3))
    with pytest.raises(OnnxConversionError, match=message):
        converted(build(x))


@pytest.mark.parametrize(
    "batch_dims, data_shape, indices",
    [
        (0, (3, 4), np.array([[0, 1], [2, -1]])),  # full tuples → scalars
        (0, (3, 4, 2), np.array([[1], [0], [2]])),  # partial tuples → slices
        (1, (3, 4, 2), np.array([[1, 0], [3, 1], [-2, 1]])),  # one tuple per batch row
        (1, (3, 4, 5), np.array([[[0], [2]], [[1], [3]], [[3], [0]]])),
    ],
)
def test_gather_nd_against_the_reference(batch_dims, data_shape, indices):
    x = np.random.default_rng(3).normal(size=data_shape)
    model = single_node("GatherND", ["x", "i"], x, {"i": indices}, batch_dims=batch_dims)
    assert_matches_reference(model, x)
    assert_gradient_matches_finite_differences(model, x)


def test_gather_nd_inside_a_point_runs_under_vmap():
    """Tuples into the axes after the batch axis (batch_dims = 0 on a transposed x): the per-point vmap path."""
    x = np.random.default_rng(4).normal(size=(3, 4, 2))
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 2, 0]),
        helper.make_node("GatherND", ["t", "i"], ["g"]),
        helper.make_node("Transpose", ["g"], ["y"], perm=[1, 0]),
    ]
    model = graph_model(nodes, x, {"i": np.array([[1, 0], [3, 1], [-2, 1]])})
    assert_matches_reference(model, x)
    assert_vmap_per_point_matches(model, x)

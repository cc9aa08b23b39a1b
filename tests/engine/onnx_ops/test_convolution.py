"""Conv, ConvTranspose, MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool in 1-D, 2-D, 3-D against onnx's reference
evaluator (float64), their gradients against finite differences, and per-point vmap."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from ntklab.engine.nets.onnx_ops.registry import OnnxConversionError
from tests.engine.onnx_ops.reference import (
    assert_gradient_matches_finite_differences,
    assert_matches_reference,
    assert_vmap_per_point_matches,
    converted,
    reference,
    single_node,
)

SIZES = {1: (9,), 2: (6, 7), 3: (5, 4, 5)}


def conv_case(seed: int, n: int, auto_pad: str, group: int, *, batch: int = 2, bias: bool = True):
    """A Conv node of rank n with random kernel, strides, dilations and (for NOTSET) asymmetric pads; x, initializers, attributes."""
    rng = np.random.default_rng(seed)
    kernel = [int(k) for k in rng.integers(1, 4, size=n)]
    strides = [int(s) for s in rng.integers(1, 3, size=n)]
    dilations = [int(d) for d in rng.integers(1, 3, size=n)] if auto_pad != "VALID" else [1] * n
    per_group_in, per_group_out = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    x = rng.standard_normal((batch, group * per_group_in, *SIZES[n]))
    inits = {"w": rng.standard_normal((group * per_group_out, per_group_in, *kernel))}
    if bias:
        inits["b"] = rng.standard_normal(group * per_group_out)
    attributes = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "group": group}
    if auto_pad == "NOTSET":
        attributes["pads"] = [int(p) for p in rng.integers(0, 3, size=2 * n)]
    else:
        attributes["auto_pad"] = auto_pad
    return x, inits, attributes


CONV_CASES = [
    (seed, n, auto_pad, group)
    for seed, (n, auto_pad, group) in enumerate(
        [
            (1, "NOTSET", 1),
            (1, "NOTSET", 3),
            (1, "SAME_UPPER", 2),
            (1, "SAME_LOWER", 1),
            (1, "VALID", 2),
            (2, "NOTSET", 1),
            (2, "NOTSET", 2),
            (2, "SAME_UPPER", 1),
            (2, "SAME_LOWER", 3),
            (2, "VALID", 1),
            (3, "NOTSET", 2),
            (3, "SAME_UPPER", 1),
            (3, "SAME_LOWER", 2),
            (3, "VALID", 1),
        ]
    )
]


@pytest.mark.parametrize("seed, n, auto_pad, group", CONV_CASES)
def test_conv_matches_the_reference_in_every_rank_group_and_padding(seed, n, auto_pad, group):
    x, inits, attributes = conv_case(seed, n, auto_pad, group, bias=seed % 2 == 0)
    inputs = ["x", "w", "b"] if "b" in inits else ["x", "w"]
    assert_matches_reference(single_node("Conv", inputs, x, inits, **attributes), x)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_depthwise_conv_matches_the_reference(n):
    rng = np.random.default_rng(40 + n)
    x = rng.standard_normal((2, 3, *SIZES[n]))
    inits = {"w": rng.standard_normal((6, 1, *[2] * n)), "b": rng.standard_normal(6)}  # channel multiplier 2
    model = single_node("Conv", ["x", "w", "b"], x, inits, group=3, pads=[1] * n + [0] * n, strides=[2] * n)
    assert_matches_reference(model, x)


def test_conv_without_attributes_takes_its_kernel_from_the_weight():
    rng = np.random.default_rng(50)
    x = rng.standard_normal((2, 2, 6))
    assert_matches_reference(single_node("Conv", ["x", "w"], x, {"w": rng.standard_normal((3, 2, 3))}), x)


@pytest.mark.parametrize("n, auto_pad, group", [(1, "NOTSET", 2), (2, "SAME_LOWER", 2), (3, "NOTSET", 1)])
def test_conv_gradient_and_per_point_vmap(n, auto_pad, group):
    x, inits, attributes = conv_case(60 + n, n, auto_pad, group, batch=2)
    x = x[..., :4]  # small for gradcheck
    model = single_node("Conv", ["x", "w", "b"], x, inits, **attributes)
    assert_gradient_matches_finite_differences(model, x)
    assert_vmap_per_point_matches(model, x)


# ---- ConvTranspose


def conv_transpose_case(seed: int, n: int, group: int):
    rng = np.random.default_rng(seed)
    kernel = [int(k) for k in rng.integers(2, 4, size=n)]
    strides = [int(s) for s in rng.integers(1, 3, size=n)]
    dilations = [int(d) for d in rng.integers(1, 3, size=n)]
    per_group_in, per_group_out = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    x = rng.standard_normal((2, group * per_group_in, *[s - 1 for s in SIZES[n]]))
    inits = {
        "w": rng.standard_normal((group * per_group_in, per_group_out, *kernel)),
        "b": rng.standard_normal(group * per_group_out),
    }
    output_padding = [int(rng.integers(0, s)) for s in strides]  # < stride (onnx's reference needs that)
    attributes = {
        "kernel_shape": kernel,
        "strides": strides,
        "dilations": dilations,
        "group": group,
        "pads": [int(p) for p in rng.integers(0, 2, size=2 * n)],
        "output_padding": output_padding,
    }
    return x, inits, attributes


def grouped_reference(x: np.ndarray, inits: dict, attributes: dict) -> np.ndarray:
    """ConvTranspose of `group` groups as `group` reference evaluations of group 1 (onnx's reference mixes up the
    channels of group > 1), concatenated along the channels."""
    group = attributes["group"]
    xs, ws, bs = np.split(x, group, axis=1), np.split(inits["w"], group), np.split(inits["b"], group)
    parts = [
        reference(
            single_node("ConvTranspose", ["x", "w", "b"], xg, {"w": wg, "b": bg}, **{**attributes, "group": 1}), xg
        )
        for xg, wg, bg in zip(xs, ws, bs)
    ]
    return np.concatenate(parts, axis=1)


def assert_converted_equals(model, x, expected, tol=1e-12):
    got = converted(model)(torch.as_tensor(x)).detach().numpy()
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("seed, n", [(70, 1), (71, 2), (72, 3), (73, 1), (74, 2)])
def test_conv_transpose_with_output_padding_matches_the_reference(seed, n):
    x, inits, attributes = conv_transpose_case(seed, n, 1)
    assert_matches_reference(single_node("ConvTranspose", ["x", "w", "b"], x, inits, **attributes), x)


@pytest.mark.parametrize("seed, n, group", [(80, 1, 2), (81, 2, 3), (82, 3, 2)])
def test_grouped_conv_transpose_matches_the_reference_group_by_group(seed, n, group):
    x, inits, attributes = conv_transpose_case(seed, n, group)
    assert_converted_equals(
        single_node("ConvTranspose", ["x", "w", "b"], x, inits, **attributes),
        x,
        grouped_reference(x, inits, attributes),
    )


@pytest.mark.parametrize(
    "n, auto_pad", [(1, "SAME_UPPER"), (2, "SAME_LOWER"), (2, "SAME_UPPER"), (3, "SAME_LOWER"), (2, "VALID")]
)
def test_conv_transpose_auto_pad_matches_the_reference(n, auto_pad):
    x, inits, attributes = conv_transpose_case(90 + n, n, 1)
    del attributes["pads"]
    attributes["output_padding"] = [0] * n
    attributes["dilations"] = [1] * n  # onnx's reference ignores dilations when sizing SAME
    model = single_node("ConvTranspose", ["x", "w", "b"], x, inits, auto_pad=auto_pad, **attributes)
    assert_matches_reference(model, x)


@pytest.mark.parametrize("n, auto_pad", [(1, "SAME_UPPER"), (2, "SAME_LOWER"), (3, "SAME_UPPER")])
def test_conv_transpose_output_shape_with_auto_pad_matches_the_reference(n, auto_pad):
    x, inits, attributes = conv_transpose_case(100 + n, n, 1)
    del attributes["pads"]
    full = [
        s * (size - 1) + op + (k - 1) * d + 1
        for s, size, op, k, d in zip(
            attributes["strides"],
            x.shape[2:],
            attributes["output_padding"],
            attributes["kernel_shape"],
            attributes["dilations"],
        )
    ]
    output_shape = [f - 3 + i for i, f in enumerate(full)]  # total padding 3, 2, 1: odd and even splits
    model = single_node(
        "ConvTranspose", ["x", "w", "b"], x, inits, auto_pad=auto_pad, output_shape=output_shape, **attributes
    )
    assert_matches_reference(model, x)


@pytest.mark.parametrize("n", [1, 2])
def test_conv_transpose_output_shape_gives_the_spec_pads(n):
    """output_shape with auto_pad NOTSET: pads begin = total − total/2, end = total/2 (the spec's "Else" case), which
    onnx's reference does not apply, so the expectation is the reference with those pads written out."""
    x, inits, attributes = conv_transpose_case(110 + n, n, 1)
    del attributes["pads"]
    full = [
        s * (size - 1) + op + (k - 1) * d + 1
        for s, size, op, k, d in zip(
            attributes["strides"],
            x.shape[2:],
            attributes["output_padding"],
            attributes["kernel_shape"],
            attributes["dilations"],
        )
    ]
    totals = [3, 2, 1][:n]
    pads = [t - t // 2 for t in totals] + [t // 2 for t in totals]
    model = single_node(
        "ConvTranspose", ["x", "w", "b"], x, inits, output_shape=[f - t for f, t in zip(full, totals)], **attributes
    )
    expected = reference(single_node("ConvTranspose", ["x", "w", "b"], x, inits, pads=pads, **attributes), x)
    assert expected.shape[2:] == tuple(f - t for f, t in zip(full, totals))
    assert_converted_equals(model, x, expected)


def test_conv_transpose_gradient_and_per_point_vmap():
    x, inits, attributes = conv_transpose_case(120, 2, 2)
    model = single_node("ConvTranspose", ["x", "w", "b"], x[..., :3, :3], inits, **attributes)
    assert_gradient_matches_finite_differences(model, x[..., :3, :3])
    assert_vmap_per_point_matches(model, x)


# ---- pooling


def pool_case(seed: int, n: int, auto_pad: str, ceil: bool, dilated: bool):
    rng = np.random.default_rng(seed)
    kernel = [int(k) for k in rng.integers(2, 4, size=n)]
    attributes = {"kernel_shape": kernel, "strides": [int(s) for s in rng.integers(1, 4, size=n)]}
    if dilated:
        attributes["dilations"] = [int(d) for d in rng.integers(1, 3, size=n)]
    if auto_pad == "NOTSET":
        attributes["pads"] = [int(rng.integers(0, k)) for k in kernel] + [int(rng.integers(0, k)) for k in kernel]
        attributes["ceil_mode"] = int(ceil)
    else:
        attributes["auto_pad"] = auto_pad
    return rng.standard_normal((2, 2, *SIZES[n])), attributes


POOL_CASES = [
    (seed, n, auto_pad, ceil, dilated)
    for seed, (n, auto_pad, ceil, dilated) in enumerate(
        [
            (1, "NOTSET", False, False),
            (1, "NOTSET", True, True),
            (1, "SAME_UPPER", False, False),
            (1, "VALID", False, True),
            (2, "NOTSET", False, True),
            (2, "NOTSET", True, False),
            (2, "NOTSET", True, True),
            (2, "SAME_LOWER", False, False),
            (2, "SAME_UPPER", False, True),
            (3, "NOTSET", True, False),
            (3, "NOTSET", False, True),
            (3, "SAME_UPPER", False, False),
            (3, "VALID", False, False),
        ],
        start=200,
    )
]


def spec_pads(attributes: dict, sizes) -> list[int]:
    """The pads the spec gives auto_pad: out = ⌈in / s⌉, total (out − 1)·s + (k − 1)·d + 1 − in, the odd one at the end
    (SAME_UPPER) or the beginning (SAME_LOWER); none for VALID."""
    n = len(sizes)
    strides, dilations = attributes["strides"], attributes.get("dilations", [1] * n)
    if attributes["auto_pad"] == "VALID":
        return [0] * 2 * n
    totals = [
        max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        for size, k, s, d in zip(sizes, attributes["kernel_shape"], strides, dilations)
    ]
    begin = [t // 2 if attributes["auto_pad"] == "SAME_UPPER" else t - t // 2 for t in totals]
    return begin + [t - b for t, b in zip(totals, begin)]


def assert_pool_matches_the_reference(op: str, x: np.ndarray, attributes: dict, **extra) -> None:
    """The converted pool equals onnx's reference; with auto_pad it also equals the reference given the spec's pads
    explicitly, and only that where onnx's reference strays from the spec (MaxPool SAME_LOWER with strides or
    dilations: ⌊in / s⌋ windows, the odd pad at the end; AveragePool SAME with dilations: pads of the undilated kernel)."""
    model = single_node(op, ["x"], x, **extra, **attributes)
    auto_pad = attributes.get("auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        assert_matches_reference(model, x)
        return
    explicit = {k: v for k, v in attributes.items() if k != "auto_pad"}
    assert_converted_equals(
        model, x, reference(single_node(op, ["x"], x, pads=spec_pads(attributes, x.shape[2:]), **extra, **explicit), x)
    )
    strays = (
        any(v != 1 for v in attributes["strides"] + attributes.get("dilations", []))
        and auto_pad == "SAME_LOWER"
        and op == "MaxPool"
        or any(v != 1 for v in attributes.get("dilations", []))
        and auto_pad.startswith("SAME")
        and op == "AveragePool"
    )
    if not strays:
        assert_matches_reference(model, x)


@pytest.mark.parametrize("seed, n, auto_pad, ceil, dilated", POOL_CASES)
def test_max_pool_matches_the_reference(seed, n, auto_pad, ceil, dilated):
    x, attributes = pool_case(seed, n, auto_pad, ceil, dilated)
    assert_pool_matches_the_reference("MaxPool", x, attributes)


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("seed, n, auto_pad, ceil, dilated", POOL_CASES)
def test_average_pool_matches_the_reference(seed, n, auto_pad, ceil, dilated, include):
    x, attributes = pool_case(seed, n, auto_pad, ceil, dilated)
    assert_pool_matches_the_reference(
        "AveragePool", x, attributes, opset=19 if dilated else 18, count_include_pad=include
    )


def spec_pool(x: np.ndarray, op: str, kernel, strides, dilations, begin, end, ceil: bool, include: bool) -> np.ndarray:
    """Pooling window by window as the spec words it: out = ⌊(in + pb + pe − (k − 1)·d − 1) / s⌋ + 1 (⌈·⌉ with ceil_mode,
    less a window that would start in the end pad); max of the input elements of a window, or their sum divided
    by their number (plus the window's pad elements when count_include_pad; never those past the end pad)."""
    sizes, outs = x.shape[2:], []
    for size, k, s, d, b, e in zip(sizes, kernel, strides, dilations, begin, end):
        span = size + b + e - (k - 1) * d - 1
        out = (-(-span // s) if ceil else span // s) + 1
        outs.append(out - 1 if ceil and (out - 1) * s >= size + b else out)
    y = np.zeros(x.shape[:2] + tuple(outs))
    for index in itertools.product(*map(range, outs)):
        values, count = [], 0
        for offset in itertools.product(*map(range, kernel)):
            at = [i * s + o * d - b for i, o, s, d, b in zip(index, offset, strides, dilations, begin)]
            if all(0 <= a < size for a, size in zip(at, sizes)):
                values.append(x[(..., *at)])
                count += 1
            elif include and all(-b <= a < size + e for a, b, size, e in zip(at, begin, sizes, end)):
                count += 1
        y[(..., *index)] = np.max(values, axis=0) if op == "MaxPool" else np.sum(values, axis=0) / count
    return y


@pytest.mark.parametrize("seed", range(400, 424))
def test_pools_match_a_window_by_window_reading_of_the_spec(seed):
    """Random explicit-pad pools, ceil_mode included, against spec_pool: onnx's reference strays in some of these
    (the ceil_mode overhang split over both ends, windows of stride 1 past the end pad)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3))
    kernel, strides = [int(k) for k in rng.integers(1, 5, n)], [int(s) for s in rng.integers(1, 5, n)]
    dilations = [int(d) for d in rng.integers(1, 3, n)]
    begin, end = [int(rng.integers(0, k)) for k in kernel], [int(rng.integers(0, k)) for k in kernel]
    x = rng.standard_normal((2, 2, *[int(v) for v in rng.integers(6, 11, n)]))
    ceil, include = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    for op, extra in (("MaxPool", {}), ("AveragePool", {"count_include_pad": int(include)})):
        model = single_node(
            op,
            ["x"],
            x,
            opset=19,
            kernel_shape=kernel,
            strides=strides,
            dilations=dilations,
            pads=begin + end,
            ceil_mode=int(ceil),
            **extra,
        )
        assert_converted_equals(model, x, spec_pool(x, op, kernel, strides, dilations, begin, end, ceil, include))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_symmetric_pooling_takes_torch_s_padding_and_matches_the_reference(op):
    rng = np.random.default_rng(300)
    x = rng.standard_normal((2, 2, 7, 6))
    for ceil in (0, 1):
        for include in (0, 1):
            extra = {"count_include_pad": include} if op == "AveragePool" else {}
            model = single_node(
                op, ["x"], x, kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=ceil, **extra
            )
            assert_matches_reference(model, x)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pooling_gradient_and_per_point_vmap(op):
    x, attributes = pool_case(310, 2, "NOTSET", True, op == "MaxPool")
    model = single_node(op, ["x"], x, opset=19, **attributes)
    assert_gradient_matches_finite_differences(model, x[:1, :1])
    assert_vmap_per_point_matches(model, x)


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_global_pools_match_the_reference_in_every_rank(op, n):
    x = np.random.default_rng(320 + n).standard_normal((2, 3, *SIZES[n]))
    model = single_node(op, ["x"], x)
    if op == "GlobalMaxPool" and n != 2:  # onnx's reference reduces axes (n, n + 1), the spatial ones only for n = 2
        assert_converted_equals(model, x, x.max(axis=tuple(range(2, x.ndim)), keepdims=True))
    else:
        assert_matches_reference(model, x)
    assert_vmap_per_point_matches(model, x)
    assert_gradient_matches_finite_differences(model, x[:1, :2, ..., :3])


# ---- refusals


def test_max_pool_storage_order_and_indices_are_refused_by_name():
    x = np.zeros((1, 1, 4, 4))
    with pytest.raises(OnnxConversionError, match="storage_order=1"):
        converted(single_node("MaxPool", ["x"], x, kernel_shape=[2, 2], storage_order=1))
    model = single_node("MaxPool", ["x"], x, outputs=("p", "indices"), kernel_shape=[2, 2])
    model.graph.output[0].name = "indices"
    with pytest.raises(OnnxConversionError, match="MaxPool: only its first 1 output"):
        converted(model)


def test_unknown_auto_pad_and_4d_convolution_are_refused():
    x = np.zeros((1, 1, 4, 4))
    with pytest.raises(OnnxConversionError, match="auto_pad=SAME is not supported"):
        converted(single_node("AveragePool", ["x"], x, kernel_shape=[2, 2], auto_pad="SAME"))
    with pytest.raises(OnnxConversionError, match="4-D Conv is not supported"):
        converted(single_node("Conv", ["x", "w"], x, {"w": np.zeros((1, 1, 1, 1, 1, 1))}, kernel_shape=[1, 1, 1, 1]))


def test_a_kernel_shape_other_than_the_weight_s_is_an_error_when_the_conv_runs():
    x = np.zeros((1, 1, 5))
    net = converted(single_node("Conv", ["x", "w"], x, {"w": np.zeros((1, 1, 3))}, kernel_shape=[2]))
    with pytest.raises(OnnxConversionError, match=r"kernel_shape \[2\] disagrees with the weight's \[3\]"):
        net(torch.as_tensor(x))


def test_lp_pool_is_not_an_operator():
    with pytest.raises(OnnxConversionError, match="operator LpPool is not supported"):
        converted(single_node("LpPool", ["x"], np.zeros((1, 1, 4)), kernel_shape=[2]))

"""ReduceMax … ReduceL2, ArgMax, ArgMin and CumSum as the converter runs them, against onnx's reference evaluator
(float64): axes as an attribute (opset 13) and as an input (opset 18), keepdims, noop_with_empty_axes, with their
gradients (finite differences) and the per-point vmap the jacobian kernel uses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx.reference import ReferenceEvaluator

from ntklab.engine.nets.onnx_ops.registry import OnnxConversionError
from tests.engine.onnx_ops.reference import (
    assert_forward_mode_matches_reverse,
    assert_gradient_matches_finite_differences,
    assert_matches_reference,
    assert_vmap_per_point_matches,
    converted,
    single_node,
)

REDUCTIONS = ["ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceProd", "ReduceSum", "ReduceMean"]
AXES = [[1], [-1], [1, 2], [2, -2], [0], None]


def reduction(op: str, x: np.ndarray, axes: list[int] | None, opset: int, **attributes):
    """The node with its axes where `opset` puts them: an attribute before 18 (ReduceSum: before 13), an input after."""
    if axes is not None and opset < (13 if op == "ReduceSum" else 18):
        return single_node(op, ["x"], x, opset=opset, axes=axes, **attributes)
    if axes is None:
        return single_node(op, ["x"], x, opset=opset, **attributes)
    return single_node(op, ["x", "axes"], x, {"axes": np.array(axes, dtype=np.int64)}, opset=opset, **attributes)


def involves_the_batch_axis(axes: list[int] | None, ndim: int) -> bool:
    return axes is None or any(a % ndim == 0 for a in axes)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction_matches_the_reference_gradient_and_vmap(op, opset, axes, keepdims):
    rng = np.random.default_rng([sum(map(ord, op)), opset, keepdims])
    x = rng.normal(size=(2, 3, 4))
    x = np.sign(x) * (np.abs(x) + 0.1)  # off ReduceL1's kink at 0 (random values: no ties for ReduceMax/Min)
    model = reduction(op, x, axes, opset, keepdims=keepdims)
    assert_matches_reference(model, x)
    assert_gradient_matches_finite_differences(model, x)
    assert_forward_mode_matches_reverse(model, x)
    if not involves_the_batch_axis(axes, x.ndim):  # reducing over the points is no per-point function
        assert_vmap_per_point_matches(model, x)


@pytest.mark.parametrize("op", REDUCTIONS)
def test_empty_axes_reduce_everything_or_nothing_with_noop_with_empty_axes(op):
    x = np.random.default_rng(sum(map(ord, op))).normal(size=(3, 2, 2))
    for axes in (None, []):
        for noop in (0, 1):
            model = reduction(op, x, axes, 18, noop_with_empty_axes=noop, keepdims=0)
            assert_matches_reference(model, x)
    assert_vmap_per_point_matches(reduction(op, x, None, 18, noop_with_empty_axes=1), x)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceProd", "ReduceSum"])
def test_reductions_of_integers_keep_their_type(op):
    x = np.random.default_rng(0).integers(-3, 4, size=(3, 4)).astype(np.int32)
    model = reduction(op, x, [1], 18, keepdims=0)
    assert_matches_reference(model, x)
    with torch.no_grad():
        assert converted(model)(torch.as_tensor(x)).dtype == torch.int32


@pytest.mark.parametrize("select_last_index", [0, 1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_max_min_pick_the_first_or_last_tie_and_give_int64(op, axis, keepdims, select_last_index):
    x = np.random.default_rng([sum(map(ord, op)), keepdims]).integers(-2, 3, size=(3, 4, 5)).astype(np.float64)  # ties
    attributes = {"keepdims": keepdims, "select_last_index": select_last_index} | (
        {} if axis is None else {"axis": axis}
    )
    model = single_node(op, ["x"], x, opset=13, **attributes)
    assert_matches_reference(model, x)
    with torch.no_grad():
        assert converted(model)(torch.as_tensor(x)).dtype == torch.int64
    if axis not in (None, 0):  # axis 0 (the default) is the batch axis: no per-point function
        assert_vmap_per_point_matches(model, x)


def test_arg_max_refuses_a_select_last_index_it_does_not_know_by_name():
    x = np.ones((2, 3))
    with pytest.raises(OnnxConversionError, match="ArgMax: select_last_index=2 is not supported"):
        converted(single_node("ArgMax", ["x"], x, opset=13, axis=1, select_last_index=2))


@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("axis", [np.array(1), np.array(-1, dtype=np.int32), np.array([2]), np.array(0)], ids=str)
def test_cum_sum_inclusive_exclusive_forward_and_reverse(axis, exclusive, reverse):
    x = np.random.default_rng([exclusive, reverse]).normal(size=(3, 4, 2))
    model = single_node("CumSum", ["x", "axis"], x, {"axis": axis}, opset=14, exclusive=exclusive, reverse=reverse)
    if axis.ndim == 0:  # the reference evaluator wants the spec's 0-D axis; the converter takes a 1-element one too
        assert_matches_reference(model, x)
    else:
        with torch.no_grad():
            got = converted(model)(torch.as_tensor(x)).numpy()
        flat = single_node(
            "CumSum", ["x", "axis"], x, {"axis": axis.reshape(())}, opset=14, exclusive=exclusive, reverse=reverse
        )
        np.testing.assert_allclose(got, ReferenceEvaluator(flat).run(None, {"x": x})[0], rtol=1e-12, atol=1e-12)
    assert_gradient_matches_finite_differences(model, x)
    assert_forward_mode_matches_reverse(model, x)
    if int(axis.reshape(-1)[0]) != 0:  # a running sum over the points is no per-point function
        assert_vmap_per_point_matches(model, x)


def test_cum_sum_of_integers_keeps_int32():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    model = single_node("CumSum", ["x", "axis"], x, {"axis": np.array(1)}, exclusive=1)
    assert_matches_reference(model, x)
    with torch.no_grad():
        assert converted(model)(torch.as_tensor(x)).dtype == torch.int32


def test_cum_sum_refuses_an_exclusive_it_does_not_know_by_name():
    x = np.ones((2, 3))
    with pytest.raises(OnnxConversionError, match="CumSum: exclusive=2 is not supported"):
        converted(single_node("CumSum", ["x", "axis"], x, {"axis": np.array(1)}, exclusive=2))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_max_min_of_bool_at_opset_20_is_any_all(op):
    x = np.random.default_rng(2).random((3, 4, 2)) < 0.3
    model = reduction(op, x, [1], 20, keepdims=0)
    assert_matches_reference(model, x)
    with torch.no_grad():
        assert converted(model)(torch.as_tensor(x)).dtype == torch.bool

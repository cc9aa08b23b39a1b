"""Reductions over axes: ReduceMean, ReduceSum, ReduceMax, … (axes as an attribute before opset 18, an input from 18 on;
ReduceSum's from 13), ArgMax, ArgMin, CumSum. Integer inputs keep their type, as ONNX says."""

from __future__ import annotations

import torch

from ntklab.engine.nets.onnx_ops.registry import Node, Run, operator

REDUCE = ("axes", "keepdims", "noop_with_empty_axes")


def axes_of(node: Node) -> list[int] | None:
    """The `axes` attribute (older opsets) or the constant second input (newer), None when absent."""
    return node.attr("axes") if "axes" in node.attributes else node.known(1, "axes")


def _reduce(node: Node, function, over_nothing=lambda x: x) -> Run:
    """`function(x, dim=tuple, keepdim=bool)` over the node's axes; all axes when none are given, unless
    noop_with_empty_axes: then `over_nothing(x)`, the reduction over no axis (x itself; |x| for the norms, whose
    elementwise step still applies, as the spec's text and the reference evaluator have it)."""
    keepdims, noop = bool(node.attr("keepdims", 1)), node.attr("noop_with_empty_axes", 0)
    axes = axes_of(node)

    def reduce(x, _axes=None):
        if not axes:
            return over_nothing(x) if noop else function(x, dim=tuple(range(x.dim())), keepdim=keepdims)
        return function(x, dim=tuple(axes), keepdim=keepdims)

    return reduce


def _sum(x, dim, keepdim):
    return torch.sum(x, dim=dim, keepdim=keepdim, dtype=x.dtype)  # int32 stays int32 (torch would give int64)


def _prod(x, dim, keepdim):
    y = x
    for axis in dim:  # torch.prod reduces one axis at a time; keepdim keeps the other axes' numbers
        y = torch.prod(y, dim=axis, keepdim=True, dtype=x.dtype)
    return y if keepdim else y.squeeze(dim)


def _l1(x, dim, keepdim):
    return _sum(torch.abs(x), dim, keepdim)


def _l2(x, dim, keepdim):
    if not x.is_floating_point():  # as ONNX: √Σx² in floating point, cast back to the integer type
        return torch.linalg.vector_norm(x.to(torch.float64), 2, dim=dim, keepdim=keepdim).to(x.dtype)
    return torch.linalg.vector_norm(x, 2, dim=dim, keepdim=keepdim)  # gradient 0, not NaN, at x = 0


@operator("ReduceMean", *REDUCE)
def reduce_mean(node: Node) -> Run:
    """Mean over `axes` (all when empty)."""
    return _reduce(node, torch.mean)


@operator("ReduceSum", *REDUCE)
def reduce_sum(node: Node) -> Run:
    """Sum over `axes` (all when empty)."""
    return _reduce(node, _sum)


@operator("ReduceMax", *REDUCE)
def reduce_max(node: Node) -> Run:
    """Max over `axes` (all when empty); the gradient is shared among ties."""
    return _reduce(node, torch.amax)


@operator("ReduceMin", *REDUCE)
def reduce_min(node: Node) -> Run:
    """Min over `axes` (all when empty); the gradient is shared among ties."""
    return _reduce(node, torch.amin)


@operator("ReduceProd", *REDUCE)
def reduce_prod(node: Node) -> Run:
    """Product over `axes` (all when empty)."""
    return _reduce(node, _prod)


@operator("ReduceL1", *REDUCE)
def reduce_l1(node: Node) -> Run:
    """Σ|x| over `axes` (all when empty)."""
    return _reduce(node, _l1, torch.abs)


@operator("ReduceL2", *REDUCE)
def reduce_l2(node: Node) -> Run:
    """√(Σx²) over `axes` (all when empty)."""
    return _reduce(node, _l2, torch.abs)


def _arg(node: Node, function) -> Run:
    axis, keepdims, last = node.attr("axis", 0), bool(node.attr("keepdims", 1)), node.attr("select_last_index", 0)
    if last not in (0, 1):
        raise node.refuse(f"select_last_index={last} is not supported (0, 1)")

    def run(x):
        if not last:
            return function(x, dim=axis, keepdim=keepdims)
        size = x.shape[axis]  # the index of the first extremum of the flipped axis, counted from the end
        return size - 1 - function(torch.flip(x, (axis,)), dim=axis, keepdim=keepdims)

    return run


@operator("ArgMax", "axis", "keepdims", "select_last_index")
def arg_max(node: Node) -> Run:
    """Index (int64) of the max along `axis` (0): the first one, or the last with select_last_index = 1."""
    return _arg(node, torch.argmax)


@operator("ArgMin", "axis", "keepdims", "select_last_index")
def arg_min(node: Node) -> Run:
    """Index (int64) of the min along `axis` (0): the first one, or the last with select_last_index = 1."""
    return _arg(node, torch.argmin)


@operator("CumSum", "exclusive", "reverse")
def cum_sum(node: Node) -> Run:
    """y_i = Σ_{j ≤ i} x_j along the constant `axis` input (j < i if exclusive; j ≥ i, or j > i, if reverse)."""
    axis = node.known(1, "axis")
    if axis is None or len(axis) != 1:
        raise node.refuse(f"axis={axis} is not supported (CumSum needs one axis)")
    axis = axis[0]
    exclusive, reverse = node.attr("exclusive", 0), node.attr("reverse", 0)
    for name, value in (("exclusive", exclusive), ("reverse", reverse)):
        if value not in (0, 1):
            raise node.refuse(f"{name}={value} is not supported (0, 1)")

    def run(x, _axis=None):
        y = torch.flip(x, (axis,)) if reverse else x
        if exclusive:  # Σ_{j < i}: the running sum of all but the last, after a zero
            n = y.shape[axis]
            head = torch.zeros_like(y.narrow(axis, 0, min(n, 1)))
            y = torch.cat([head, torch.cumsum(y.narrow(axis, 0, max(n - 1, 0)), dim=axis, dtype=x.dtype)], dim=axis)
        else:
            y = torch.cumsum(y, dim=axis, dtype=x.dtype)
        return torch.flip(y, (axis,)) if reverse else y

    return run

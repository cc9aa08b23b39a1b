"""Reductions over axes: ReduceMean, ReduceSum, … (axes as an attribute before opset 18, an input from 18 on)."""

from __future__ import annotations

import torch

from workers.engine.onnx_ops.registry import Node, Run, operator


def axes_of(node: Node) -> list[int] | None:
    """The `axes` attribute (older opsets) or the constant second input (newer), None when absent."""
    return node.attr("axes") if "axes" in node.attributes else node.known(1, "axes")


def _reduce(node: Node, function) -> Run:
    keepdims, noop = bool(node.attr("keepdims", 1)), node.attr("noop_with_empty_axes", 0)
    axes = axes_of(node)

    def reduce(x, _axes=None):
        if not axes:
            return x if noop else function(x, dim=tuple(range(x.dim())), keepdim=keepdims)
        return function(x, dim=tuple(axes), keepdim=keepdims)

    return reduce


@operator("ReduceMean", "axes", "keepdims", "noop_with_empty_axes")
def reduce_mean(node: Node) -> Run:
    """Mean over `axes` (all when empty)."""
    return _reduce(node, torch.mean)


@operator("ReduceSum", "axes", "keepdims", "noop_with_empty_axes")
def reduce_sum(node: Node) -> Run:
    """Sum over `axes` (all when empty)."""
    return _reduce(node, torch.sum)

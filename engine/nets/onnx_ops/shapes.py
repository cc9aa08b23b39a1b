"""Shapes and types: Shape, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat, Cast, Constant, Identity, Dropout,
Split, Expand, Tile, ConstantOfShape, Range.

Inputs that are shapes, sizes or repeat counts are read with `int_values`: the constant's value
when it is known at conversion, else the run-time tensor's values (a shape tensor computed from
Shape(x), never a batched data tensor, so reading its values is fine under vmap).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from onnx import TensorProto, numpy_helper
from torch import Tensor

from ntklab.engine.nets.onnx_ops.reductions import axes_of
from ntklab.engine.nets.onnx_ops.registry import Node, Run, operator

FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16)
INTEGER_TYPES = {TensorProto.INT64: torch.int64, TensorProto.INT32: torch.int32, TensorProto.BOOL: torch.bool}


def int_values(node: Node, index: int) -> Callable[[Tensor | None], list[int] | None]:
    """Input `index` as a list of ints: its constant value (read once, here) or, computed at run time, the
    tensor's values (shape arithmetic, never a batched data tensor); None where the input is omitted."""
    if not node.has_input(index):
        return lambda _tensor: None
    value = node.constant(node.inputs[index])
    if value is not None:
        known = [int(v) for v in np.asarray(value).reshape(-1)]
        return lambda _tensor: known
    return lambda tensor: [int(v) for v in tensor.reshape(-1).tolist()]


def float_values(node: Node, index: int) -> Callable[[Tensor | None], list[float] | None]:
    """Like `int_values`, as Python floats (float64 of the stored values: Resize scales)."""
    if not node.has_input(index):
        return lambda _tensor: None
    value = node.constant(node.inputs[index])
    if value is not None:
        known = [float(v) for v in np.asarray(value, dtype=np.float64).reshape(-1)]
        return lambda _tensor: known
    return lambda tensor: [float(v) for v in tensor.detach().reshape(-1).tolist()]


@operator("Constant", "value", "value_float", "value_floats", "value_int", "value_ints")
def constant(node: Node) -> Run:
    """A tensor fixed in the graph (a buffer; float values take the network's dtype)."""
    attributes = node.attributes
    if "value" in attributes:
        value = torch.as_tensor(numpy_helper.to_array(attributes["value"]).copy())
    elif "value_float" in attributes or "value_floats" in attributes:
        value = torch.tensor(attributes.get("value_float", attributes.get("value_floats")), dtype=torch.float32)
    else:
        value = torch.tensor(attributes.get("value_int", attributes.get("value_ints")), dtype=torch.int64)
    if value.is_floating_point():
        value = value.to(node.float_dtype)
    return lambda: value


@operator("Shape", "start", "end")
def shape(node: Node) -> Run:
    """The shape of X (batch axis included) as int64, dims [start, end)."""
    start, end = node.attr("start", 0), node.attr("end")
    return lambda x: torch.tensor(list(x.shape)[start:end], dtype=torch.int64, device=x.device)


@operator("Reshape", "allowzero")
def reshape(node: Node) -> Run:
    """X reshaped; a 0 in the target copies X's dimension (allowzero = 0), −1 is inferred."""
    allowzero = node.attr("allowzero", 0)
    target_of = int_values(node, 1)

    def run(x, target):
        dims = target_of(target)
        if not allowzero:
            dims = [x.shape[i] if v == 0 else v for i, v in enumerate(dims)]
        return x.reshape(dims)

    return run


@operator("Flatten", "axis")
def flatten(node: Node) -> Run:
    """X as 2-D: [∏ dims before axis, ∏ dims from axis]."""
    axis = node.attr("axis", 1)
    return lambda x: x.reshape(math.prod(x.shape[: axis % (x.dim() + 1)]), -1)


@operator("Transpose", "perm")
def transpose(node: Node) -> Run:
    """X with its axes permuted (reversed without perm)."""
    perm = node.attr("perm")
    return lambda x: x.permute(perm if perm is not None else list(reversed(range(x.dim()))))


@operator("Squeeze", "axes")
def squeeze(node: Node) -> Run:
    """X without the size-1 axes listed (all size-1 axes without axes)."""
    axes = axes_of(node)

    def run(x, _axes=None):
        return x.squeeze() if axes is None else x.squeeze(tuple(axis % x.dim() for axis in axes))

    return run


@operator("Unsqueeze", "axes")
def unsqueeze(node: Node) -> Run:
    """X with size-1 axes inserted at `axes` (positions in the output)."""
    axes = axes_of(node)
    if axes is None:
        raise node.refuse("axes are required")

    def run(x, _axes=None):
        rank = x.dim() + len(axes)
        for axis in sorted(axis % rank for axis in axes):
            x = x.unsqueeze(axis)
        return x

    return run


@operator("Concat", "axis")
def concat(node: Node) -> Run:
    """The inputs joined along `axis`."""
    axis = node.attr("axis")
    return lambda *xs: torch.cat(xs, dim=axis)


@operator("Identity")
def identity(node: Node) -> Run:
    """X."""
    return lambda x: x


@operator("Dropout", "seed")
def dropout(node: Node) -> Run:
    """X (inference: no dropout; a training_mode input that is not a constant false is refused)."""
    training = node.known(2, "training_mode")
    if training and training[0]:
        raise node.refuse("training_mode = true is not supported (export in eval mode)")
    return lambda x, *_: x


@operator("Cast", "to", "saturate")
def cast(node: Node) -> Run:
    """X converted to `to`; every float type becomes the network's dtype, so a float64 job stays float64."""
    to = node.attr("to")
    if to in FLOAT_TYPES:
        dtype = node.float_dtype
        return lambda x: x.to(dtype)
    if to not in INTEGER_TYPES:
        raise node.refuse(f"Cast to {TensorProto.DataType.Name(to)} is not supported")
    return lambda x: x.to(INTEGER_TYPES[to])


@operator("CastLike", "saturate")
def cast_like(node: Node) -> Run:
    """X converted to the element type of `target_type`; a float target is the network's dtype (as Cast)."""
    dtype = node.float_dtype
    return lambda x, like: x.to(dtype if like.is_floating_point() else like.dtype)


@operator("Split", "axis", "split", "num_outputs", outputs=64)
def split(node: Node) -> Run:
    """X cut along `axis` into pieces of the `split` sizes, or into equal pieces (the last smaller) without them."""
    axis = node.attr("axis", 0)
    pieces = node.attr("num_outputs") or len(node.proto.output)
    sizes_attribute = node.attr("split")  # before opset 13 the sizes are an attribute, from 13 on an input
    sizes_of = int_values(node, 1)

    def run(x, sizes=None):
        sizes = list(sizes_attribute) if sizes_attribute else sizes_of(sizes)
        if not sizes:
            length = x.shape[axis]
            chunk = -(-length // pieces)
            sizes = [chunk] * (pieces - 1) + [length - chunk * (pieces - 1)]
        return tuple(torch.split(x, sizes, dim=axis))

    return run


@operator("Expand")
def expand(node: Node) -> Run:
    """X broadcast (numpy rules, both ways) with the shape input."""
    shape_of = int_values(node, 1)

    def run(x, target):
        return x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(shape_of(target))))

    return run


@operator("Tile")
def tile(node: Node) -> Run:
    """X repeated `repeats[i]` times along each axis i."""
    repeats_of = int_values(node, 1)
    return lambda x, repeats: x.tile(tuple(repeats_of(repeats)))


@operator("ConstantOfShape", "value")
def constant_of_shape(node: Node) -> Run:
    """A tensor of the shape input filled with `value` (default float 0; float values take the network's dtype)."""
    value = node.attributes.get("value")
    array = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, dtype=np.float32)
    if array.size != 1:
        raise node.refuse(f"value must hold one element, not {array.size}")
    fill = torch.as_tensor(array.copy()).reshape(())
    if fill.is_floating_point():
        fill = fill.to(node.float_dtype)
    shape_of = int_values(node, 0)

    def run(target):
        return fill.to(target.device).expand(shape_of(target)).clone()

    return run


@operator("Range")
def range_(node: Node) -> Run:
    """start, start + delta, … up to (not including) limit: max(⌈(limit − start) / delta⌉, 0) values of start's type."""

    def run(start, limit, delta):
        start, limit, delta = start.reshape(()), limit.reshape(()), delta.reshape(())
        first, last, step = start.tolist(), limit.tolist(), delta.tolist()
        if not start.is_floating_point():
            count = max(-((first - last) // step), 0)
            return first + step * torch.arange(count, dtype=start.dtype, device=start.device)
        count = max(math.ceil((last - first) / step), 0)
        return start + delta.to(start.dtype) * torch.arange(count, dtype=start.dtype, device=start.device)

    return run

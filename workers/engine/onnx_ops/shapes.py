"""Shapes and types: Shape, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat, Cast, Constant, Identity, Dropout."""

from __future__ import annotations

import math

import torch
from onnx import TensorProto, numpy_helper

from workers.engine.onnx_ops.reductions import axes_of
from workers.engine.onnx_ops.registry import Node, Run, operator

FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16)
INTEGER_TYPES = {TensorProto.INT64: torch.int64, TensorProto.INT32: torch.int32, TensorProto.BOOL: torch.bool}


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

    def run(x, target):
        dims = [int(v) for v in target.tolist()]
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

"""The converter's operator table: ONNX op type → the builder of its torch function and the attributes it accepts.

    @operator("Clip")
    def clip(node: Node) -> Run: ...        # node.attributes, node.known(i), node.refuse(...)

A builder sees one node (attributes decoded, constant inputs readable) and returns `run`, a
function of the node's input tensors (None for an omitted optional input) that returns its
output, or a tuple of outputs for a multi-output node. Every attribute a node carries must
be in its operator's `attributes`, else the node is refused naming the attribute; an
attribute value a builder does not implement is refused by the builder, by name.

The table is the single source of what an upload may use: `python -m ntklab.engine.nets.onnx_ops.table`
writes it torch-free to api_schemas/onnx_operators.py (for the API's upload check) and to
docs/models.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch
from torch import Tensor

Run = Callable[..., Any]
FAMILIES = (
    "arithmetic",
    "activations",
    "logic",
    "reductions",
    "shapes",
    "indexing",
    "convolution",
    "normalization",
    "recurrent",
)


class OnnxConversionError(ValueError):
    """The ONNX graph uses something the converter does not implement; the message names the node."""


@dataclass(frozen=True)
class Operator:
    name: str
    build: Callable[[Node], Run]
    attributes: frozenset[str]
    outputs: int
    family: str
    summary: str


@dataclass
class Node:
    """One node as a builder sees it: decoded attributes, the opset, the network's float dtype, constants by name."""

    proto: onnx.NodeProto
    attributes: dict[str, Any]
    opset: int
    float_dtype: torch.dtype
    constant: Callable[[str], np.ndarray | None]

    @property
    def inputs(self) -> list[str]:
        return list(self.proto.input)

    def attr(self, name: str, default: Any = None) -> Any:
        value = self.attributes.get(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def has_input(self, index: int) -> bool:
        return len(self.proto.input) > index and bool(self.proto.input[index])

    def known_array(self, index: int, what: str) -> np.ndarray | None:
        """Input `index` as an array known when converting (None if omitted); refuses one computed at run time."""
        if not self.has_input(index):
            return None
        value = self.constant(self.proto.input[index])
        if value is None:
            raise OnnxConversionError(f"{what} (input {index}) must be a constant")
        return np.asarray(value)

    def known(self, index: int, what: str) -> list[int] | None:
        """Input `index` as a list of ints known when converting (axes, pads, a repeat count), None if omitted."""
        value = self.known_array(index, what)
        return None if value is None else [int(v) for v in value.reshape(-1)]

    def refuse(self, message: str) -> OnnxConversionError:
        return OnnxConversionError(message)


TABLE: dict[str, Operator] = {}


def operator(name: str, *attributes: str, outputs: int = 1) -> Callable[[Callable[[Node], Run]], Callable[[Node], Run]]:
    """Register `build` as the builder of ONNX operator `name`, accepting exactly `attributes`; `outputs` it may give."""

    def register(build: Callable[[Node], Run]) -> Callable[[Node], Run]:
        family = build.__module__.rsplit(".", 1)[-1]
        summary = (build.__doc__ or "").strip().splitlines()[0] if build.__doc__ else ""
        TABLE[name] = Operator(name, build, frozenset(attributes), outputs, family, summary)
        return build

    return register


def table() -> dict[str, Operator]:
    """Every registered operator (imports the family modules on first use)."""
    for family in FAMILIES:
        importlib.import_module(f"ntklab.engine.nets.onnx_ops.{family}")
    return TABLE


def decoded_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as Python values; float attributes as the shortest decimal that rounds to the stored float32.

    ONNX stores float attributes (epsilon, alpha, …) in float32: a module's eps = 1e-5 arrives as
    9.99999974738e-06, which moves a float64 LayerNorm's output by ~1e-10 relative (measured on
    GPT-2). The shortest decimal string of the float32 ("1e-05") is the literal the module was
    written with whenever that literal has at most 7 significant digits, so float64 networks get
    the module's own constant back; other values keep the float32 value to within its rounding.
    """
    decoded = {}
    for attribute in node.attribute:
        value = onnx.helper.get_attribute_value(attribute)
        if attribute.type == onnx.AttributeProto.FLOAT:
            value = float(str(np.float32(value)))
        elif attribute.type == onnx.AttributeProto.FLOATS:
            value = [float(str(np.float32(v))) for v in value]
        decoded[attribute.name] = value
    return decoded


def float_like(x: Tensor, value: Tensor) -> Tensor:
    """`value` cast to x's dtype when x is floating point (ONNX attributes and scalars arrive as float32/float64)."""
    return value.to(x.dtype) if x.is_floating_point() and value.is_floating_point() else value

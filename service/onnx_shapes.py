"""Every tensor's shape in an ONNX graph for a concrete batch size, with its shape arithmetic evaluated.

ONNX shape inference alone loses a real export's shapes: a Reshape whose target is computed at run time
(Shape → Gather → Concat → Reshape, or a Range, a computed Pad) gets fresh symbols (unk__N) for every axis,
the batch axis included, and everything after it inherits them. Here the input's batch axis is set to
`batch`, and then, round after round until nothing changes (at most MAX_ROUNDS):

    1. shape inference (with data propagation) runs on a light copy of the graph: every trainable weight and
       every large initializer is replaced by a graph input of the same type and shape, so no weight bytes
       are copied;
    2. in graph order, a node whose inputs are all known values is evaluated with
       onnx.reference.ReferenceEvaluator (the node alone, the model's opset), its outputs become known
       values and the node an initializer of the copy; Shape and Size of a tensor whose inferred shape is
       concrete are known values too (evaluated on a zero-stride view: no activation is allocated).

A node is evaluated only when its operator is shape arithmetic (SHAPE_OPERATORS) and its output is bounded
before it is computed: at most MAX_VALUE_ELEMENTS elements (from the inferred shape, or from the
operator's own rule for ConstantOfShape, Range, Expand and Tile, or by broadcasting), so an upload cannot
make the API allocate. Nothing else runs: no float activation, no weight is ever computed; the values
are index and size arithmetic of a few elements (a Reshape target, pads, a causal mask's length).

The result maps each tensor name to its dims (ints where known, a symbol string where not) or None.
Inference is strict: a graph that cannot run at the batch size (a Reshape to a target its elements do not
fit, operands that do not broadcast) raises ShapeError with inference's message, naming the operator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from ntklab.api_schemas.uploads import trainable_initializers

MAX_ROUNDS = 16
"""Rounds of inference and evaluation; each resolves at least one more level of shape-on-shape dependence."""
MAX_VALUE_ELEMENTS = 1 << 16
"""Largest tensor evaluated (elements); shape arithmetic is a few elements, a mask a sequence length squared."""
SHAPE_OPERATORS = frozenset(
    {
        "Shape",
        "Size",
        "Constant",
        "Identity",
        "Cast",
        "CastLike",
        "Gather",
        "GatherElements",
        "Slice",
        "Concat",
        "Unsqueeze",
        "Squeeze",
        "Reshape",
        "Flatten",
        "Transpose",
        "Split",
        "Expand",
        "Tile",
        "ConstantOfShape",
        "Range",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "Neg",
        "Abs",
        "Floor",
        "Ceil",
        "Sqrt",
        "Pow",
        "Min",
        "Max",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "Not",
        "And",
        "Or",
        "Xor",
        "Where",
        "ReduceProd",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "CumSum",
        "Trilu",
        "Sign",
        "Clip",
    }
)
ELEMENTWISE = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "Pow",
        "Min",
        "Max",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "And",
        "Or",
        "Xor",
        "Where",
        "Clip",
    }
)
Dims = list  # list[int | str]


class ShapeError(ValueError):
    """Shape inference found the graph cannot run at the batch size asked (a Reshape target its elements do not fit)."""


def concrete_shapes(model: onnx.ModelProto, input_name: str, batch: int) -> dict[str, Dims | None]:
    """The dims of every input, initializer and node output of `model` with the input's batch axis = `batch`;
    ShapeError if the graph cannot run at that batch size."""
    light, values = _light_copy(model, input_name, batch)
    opsets = {entry.domain or "": entry.version for entry in model.opset_import}
    shapes: dict[str, Dims | None] = {}
    for _ in range(MAX_ROUNDS):
        shapes = _inferred(light)
        if not _evaluate_round(light, values, shapes, opsets):
            break
    for name, value in values.items():
        shapes[name] = list(value.shape)
    return shapes


def weightless_copy(model: onnx.ModelProto, keep: Callable[[onnx.TensorProto], bool]) -> onnx.ModelProto:
    """A copy of `model`'s graph (nodes, inputs, outputs, opsets) in which every initializer `keep` refuses is a graph
    input of the same type and shape instead: checking and shape inference see the same graph without the weight
    bytes (a copy of a 200 MB model is then a few kB)."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    graph = light.graph
    graph.name = model.graph.name
    graph.node.extend(model.graph.node)
    graph.output.extend(model.graph.output)
    initializers = {tensor.name for tensor in model.graph.initializer}
    graph.input.extend(value for value in model.graph.input if value.name not in initializers)
    for tensor in model.graph.initializer:
        if keep(tensor):
            graph.initializer.append(tensor)
        else:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return light


def is_small(tensor: onnx.TensorProto) -> bool:
    """At most MAX_VALUE_ELEMENTS elements: a shape, an index table, a scalar."""
    return math.prod(tensor.dims) <= MAX_VALUE_ELEMENTS


def _light_copy(model: onnx.ModelProto, input_name: str, batch: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The weightless copy of step 1 (the small initializers that are not trainable kept, and known as values from
    the start), its input's batch axis fixed."""
    trainable = {name for name, _ in trainable_initializers(model.graph)}
    light = weightless_copy(model, lambda tensor: tensor.name not in trainable and is_small(tensor))
    for value in light.graph.input:
        if value.name == input_name:
            value.type.tensor_type.shape.dim[0].Clear()
            value.type.tensor_type.shape.dim[0].dim_value = batch
    return light, {tensor.name: numpy_helper.to_array(tensor) for tensor in light.graph.initializer}


def _inferred(light: onnx.ModelProto) -> dict[str, Dims | None]:
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError) as error:
        raise ShapeError(str(error).strip()) from None
    graph = inferred.graph
    shapes = {value.name: value_dims(value) for value in (*graph.input, *graph.value_info, *graph.output)}
    shapes |= {tensor.name: list(tensor.dims) for tensor in graph.initializer}
    return shapes


def _evaluate_round(
    light: onnx.ModelProto, values: dict[str, np.ndarray], shapes: dict[str, Dims | None], opsets: dict[str, int]
) -> bool:
    """Evaluate every node that can be (module docstring, step 2); True if any was. Evaluated nodes leave the
    copy's graph and their outputs join its initializers."""
    kept, evaluated = [], False
    for node in light.graph.node:
        outputs = _evaluated(node, values, shapes, opsets)
        if outputs is None:
            kept.append(node)
            continue
        evaluated = True
        for name, value in outputs.items():
            values[name] = value
            shapes[name] = list(value.shape)
            light.graph.initializer.append(numpy_helper.from_array(value, name))
    if evaluated:
        del light.graph.node[:]
        light.graph.node.extend(kept)
    return evaluated


def _evaluated(
    node: onnx.NodeProto, values: dict[str, np.ndarray], shapes: dict[str, Dims | None], opsets: dict[str, int]
) -> dict[str, np.ndarray] | None:
    """The node's outputs by name, or None when it is not shape arithmetic, an input is unknown or the output
    could exceed MAX_VALUE_ELEMENTS."""
    if node.op_type not in SHAPE_OPERATORS or node.domain not in ("", "ai.onnx"):
        return None
    names = [name for name in node.input if name]
    if node.op_type in ("Shape", "Size"):
        dims = shapes.get(node.input[0])
        if not is_concrete(dims):
            return None
        feeds = {node.input[0]: np.broadcast_to(np.zeros((), np.float32), dims)}
    elif all(name in values for name in names):
        bound = _output_bound(node, values, shapes)
        if bound is None or bound > MAX_VALUE_ELEMENTS:
            return None
        feeds = {name: values[name] for name in names}
    else:
        return None
    try:
        results = ReferenceEvaluator(node, opsets=opsets).run(None, feeds)
    except Exception:  # noqa: BLE001 — a node the reference cannot run stays unevaluated; its shape stays inferred
        return None
    return {name: np.asarray(result) for name, result in zip(node.output, results) if name}


def _output_bound(node: onnx.NodeProto, values: dict[str, np.ndarray], shapes: dict[str, Dims | None]) -> int | None:
    """An upper bound on the elements of the node's largest output, computed before the node runs."""
    inferred = [shapes.get(name) for name in node.output if name]
    if inferred and all(is_concrete(dims) for dims in inferred):
        return max(math.prod(dims) for dims in inferred)
    inputs = [values[name] for name in node.input if name]
    try:
        if node.op_type == "ConstantOfShape":
            return _product(inputs[0].reshape(-1)) if inputs else 1
        if node.op_type == "Range":
            start, limit, delta = (float(value) for value in inputs)
            return max(0, math.ceil((limit - start) / delta)) if delta else None
        if node.op_type == "Expand":
            return _product(np.broadcast_shapes(inputs[0].shape, tuple(int(d) for d in inputs[1].reshape(-1))))
        if node.op_type == "Tile":
            return _product(np.array(inputs[0].shape) * inputs[1].reshape(-1))
        if node.op_type in ELEMENTWISE:
            return _product(np.broadcast_shapes(*(value.shape for value in inputs)))
        if node.op_type in ("Gather", "GatherElements"):
            return inputs[0].size * max(1, inputs[1].size)
    except (ValueError, IndexError, OverflowError, ZeroDivisionError):
        return None
    return sum(value.size for value in inputs) or 1


def _product(dims: Iterable) -> int | None:
    dims = [int(d) for d in dims]
    return math.prod(dims) if all(d >= 0 for d in dims) else None


def is_concrete(dims: Dims | None) -> bool:
    """Every axis known as an integer."""
    return dims is not None and all(isinstance(dim, int) for dim in dims)


def value_dims(value: onnx.ValueInfoProto) -> Dims | None:
    """A value's dims: ints where known, its symbol (or '?') where not; None without a tensor shape."""
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
        return None
    return [int(dim.dim_value) if dim.HasField("dim_value") else (dim.dim_param or "?") for dim in tensor.shape.dim]

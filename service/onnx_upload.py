"""Checking an uploaded ONNX model: the protobuf is parsed and inspected, never run.

Refused with a 422 naming what is wrong (nothing is stored):
    a pickle or a zip archive (torch.save / .pt / .pt2 checkpoints: loading them can run code),
    bytes that do not parse as an ONNX ModelProto, or that onnx.checker finds malformed;
    external-data references (a tensor whose bytes live in another file), sparse initializers,
    model-local functions, operator domains other than the default, subgraphs;
    an operator outside the converter's table (api_schemas/onnx_operators.py, generated from the worker's),
    or an attribute its builder does not accept (the error names the operator, the node and, where the
    exporter recorded it, the torch module path);
    a tensor whose declared size exceeds max_upload_bytes or differs from the bytes it holds;
    anything but one floating-point or integer input [batch, ...] with a symbolic batch axis and
    one output [batch, O]; a graph that cannot run on a batch of 1 or 2 (a Reshape target the elements
    do not fit: service/onnx_shapes.py);
    more than settings.max_model_nodes nodes and initializers together;
    more than one default-domain opset, or one outside MIN_OPSET … the newest the installed onnx knows;
    constant subgraphs whose folding would hold more than max_folded_constant_bytes or take more than
    max_folding_flops (resource cap, naming the node), or a folded or weight-only node of unknown shape (below).
The trainable parameters are the floating-point initializers with at least one dimension,
except a batch norm's running statistics (ntklab.api_schemas.uploads.trainable_initializers, the rule the
SDK and the worker use too); `trainable` lists them (name, shape) and their element count is the
model's `parameters`.

What one example costs, for the job estimate (planner/forward_profile.py), from every node output's
shape at batch 2 less its shape at batch 1 (service/onnx_shapes.concrete_shapes: shape inference with the
graph's shape arithmetic evaluated, so a Reshape to a computed target keeps its batch axis):
`activation_elements` = Σ over node outputs of their elements at batch 2 − at batch 1; `forward_flops`
= the same difference of Σ over outputs of 2·K per element for MatMul and Gemm (K the contracted width
of the input) and Conv (K = C_in/group·k_h·k_w, the weight's dims after the first), 1 per element for
every other node. What does not grow with the batch (a causal mask, shape arithmetic) cancels.
Both are None when an output's shape stays unknown.

What does not scale with the batch (ntklab.api_schemas.uploads.constant_names splits the nodes as the worker's
converter does), counted from the inferred shapes and element types, nothing evaluated:
    folded      every input a constant (Constant nodes, non-trainable initializers, outputs of folded nodes):
                computed once when the worker converts the model, its outputs kept for the job's lifetime.
                `constant_bytes` = Σ over their outputs of elements × bytes, a float output at 8 bytes (as a
                float64 job holds it; `constant_elements` counts those float elements, so a float32 job's
                estimate takes 4 bytes each); `folding_flops` = Σ of their FLOPs by the per-element rule above.
                Over max_folded_constant_bytes or max_folding_flops (the running sums, in graph order), the
                upload is refused (422, resource cap) naming the node that crossed the cap.
    fixed       not folded and not computed from the input (a trainable weight's W·W, a Transpose of a tied
                weight, a Concat of weights): run on every forward pass, once per pass whatever the batch.
                `fixed_elements` and `fixed_flops` count them like the per-example costs (an upper bound: a
                Transpose a Linear layer absorbs is counted though the layer reads W as stored).
    per-example computed from the input: the costs above.
A folded or fixed node's output must have a known shape: where the plain shape inference leaves one
unknown, the shapes are taken from service/onnx_shapes.concrete_shapes (shape arithmetic on constants —
pads, Reshape targets, Range bounds of at most 65 536 elements — evaluated); a shape still unknown after
that cannot be bounded, so the upload is refused (422, naming the node).
"""

from __future__ import annotations

import math
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from ntklab.api_schemas.onnx_operators import ONNX_OPERATOR_ATTRIBUTES
from ntklab.api_schemas.problems import RESOURCE_CAP, FieldError
from ntklab.api_schemas.uploads import (
    INVALID_UPLOAD,
    ONNX_OPERATORS,
    constant_names,
    node_description,
    trainable_initializers,
)
from ntklab.config.settings import Settings
from ntklab.service.onnx_shapes import ShapeError, concrete_shapes, is_concrete, is_small, value_dims, weightless_copy
from ntklab.service.problems import ProblemError
from ntklab.service.uploads import invalid, too_large

DEFAULT_DOMAINS = ("", "ai.onnx")
MIN_OPSET = 7
"""The oldest default-domain opset taken: numpy broadcasting throughout (opset 7 dropped the `broadcast` attribute)."""
FLOAT_TYPES = {TensorProto.FLOAT: 4, TensorProto.DOUBLE: 8, TensorProto.FLOAT16: 2}
INTEGER_TYPES = {TensorProto.INT64: 8, TensorProto.INT32: 4}
TENSOR_TYPES = FLOAT_TYPES | INTEGER_TYPES | {TensorProto.BOOL: 1}
TYPE_NAMES = {
    TensorProto.FLOAT: "float32",
    TensorProto.DOUBLE: "float64",
    TensorProto.FLOAT16: "float16",
    TensorProto.INT64: "int64",
    TensorProto.INT32: "int32",
    TensorProto.BOOL: "bool",
}
FOLDED_BYTES = {
    TensorProto.FLOAT: 8,
    TensorProto.DOUBLE: 8,
    TensorProto.FLOAT16: 8,
    TensorProto.INT64: 8,
    TensorProto.INT32: 4,
    TensorProto.INT16: 2,
    TensorProto.UINT16: 2,
    TensorProto.INT8: 1,
    TensorProto.UINT8: 1,
    TensorProto.BOOL: 1,
}
"""Bytes per element of a folded constant as the worker holds it: floats in the job's dtype (at most float64); any
other element type at 8 bytes."""
ID_CARRIERS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose"})
"""Operators that move an integer input's ids without changing them (for input_vocabulary)."""
COUNT_LIMIT = 2**62
"""Per-pass counts past this are refused at upload: far beyond any job's estimate cap, and the columns are 64-bit."""
TYPED_FIELDS = ("float_data", "double_data", "int32_data", "int64_data")
PICKLE_EXPLANATION = (
    "ntklab takes ONNX files only: loading a pickle or a torch checkpoint (.pt, .pth, .pt2) can run "
    "arbitrary code, so none is ever loaded; export the module with torch.onnx.export, or use "
    "client.models.upload(module, example_input)"
)


@dataclass(frozen=True)
class CheckedModel:
    parameters: int
    trainable: list[dict]
    inputs: list[dict]
    outputs: list[dict]
    operators: list[str]
    opset: int
    activation_elements: int | None
    forward_flops: int | None
    constant_bytes: int = 0
    constant_elements: int = 0
    folding_flops: int = 0
    fixed_elements: int = 0
    fixed_flops: int = 0
    input_vocabulary: int | None = None
    nodes: int | None = None


@dataclass(frozen=True)
class FixedCost:
    """What does not scale with the batch (module docstring): folded once at conversion, and run once per forward pass."""

    constant_bytes: int = 0
    constant_elements: int = 0
    folding_flops: int = 0
    fixed_elements: int = 0
    fixed_flops: int = 0


def check_onnx(path: Path, settings: Settings) -> CheckedModel:
    model = _parsed(path)
    if not model.HasField("graph") or not model.graph.node or model.ir_version <= 0:
        raise invalid("file", "not an ONNX model: no graph (a truncated or foreign file?)")
    opset = _opset(model)
    _refuse_outside_references(model)
    operators = _operators(model, settings)
    initializers = {tensor.name for tensor in model.graph.initializer}
    for tensor in model.graph.initializer:
        _checked_tensor(tensor, f"graph.initializer.{tensor.name}", settings)
    trainable = [{"name": name, "shape": shape} for name, shape in trainable_initializers(model.graph)]
    parameters = sum(math.prod(t["shape"]) for t in trainable)
    for index, node in enumerate(model.graph.node):
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                _checked_tensor(attribute.t, f"graph.node.{index}.{attribute.name}", settings)
    light = weightless_copy(model, is_small)  # checked and inferred without a second copy of the weights
    try:
        onnx.checker.check_model(light)
        inferred = onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, RuntimeError, ValueError) as error:
        raise invalid("file", f"the ONNX model is malformed: {str(error).strip()[:800]}") from None
    inputs = [_tensor_info(value) for value in model.graph.input if value.name not in initializers]
    outputs = [_tensor_info(value) for value in model.graph.output]
    _check_signature(inputs, outputs)
    fixed = fixed_cost(model, light, inferred, inputs[0]["name"], settings)
    return CheckedModel(
        parameters,
        trainable,
        inputs,
        outputs,
        operators,
        opset,
        *per_example_cost(model, inputs[0]["name"]),
        fixed.constant_bytes,
        fixed.constant_elements,
        fixed.folding_flops,
        fixed.fixed_elements,
        fixed.fixed_flops,
        input_vocabulary(model, inputs[0]),
        len(model.graph.node),
    )


def per_example_cost(model: onnx.ModelProto, input_name: str) -> tuple[int | None, int | None]:
    """(activation elements, forward FLOPs) of one example (module docstring): the counts of every node output at
    batch 2 less those at batch 1, from ntklab.service.onnx_shapes.concrete_shapes; (None, None) where a shape stays unknown."""
    counts = [_forward_counts(model.graph.node, _shapes_at(model, input_name, batch)) for batch in (1, 2)]
    if None in counts:
        return None, None
    (elements_1, flops_1), (elements_2, flops_2) = counts
    if max(elements_2, flops_2) > COUNT_LIMIT:  # the job's estimate would refuse it; stored, it would overflow
        raise invalid(
            "file",
            f"one forward pass of two examples computes {elements_2} elements in {flops_2} FLOPs; "
            f"more than {COUNT_LIMIT} cannot be run or stored",
        )
    return elements_2 - elements_1, flops_2 - flops_1


def input_vocabulary(model: onnx.ModelProto, signature: dict) -> int | None:
    """For an integer input, the ids it may hold: [0, V) with V the least first dimension of the initializers that a
    Gather (axis 0) reads the input's ids from as indices (nn.Embedding's export), the ids as sent or moved by
    ID_CARRIERS (GPT-2 reshapes input_ids first); None for a float input or when no such Gather reads them (a job's
    token ids are then not checked at submission)."""
    if not signature["dtype"].startswith("int"):
        return None
    tables = {tensor.name: list(tensor.dims) for tensor in model.graph.initializer}
    ids, sizes = {signature["name"]}, []
    for node in model.graph.node:
        if node.op_type in ID_CARRIERS and node.input[0] in ids:
            ids.update(name for name in node.output if name)
        elif (
            node.op_type == "Gather"
            and node.input[1] in ids
            and tables.get(node.input[0])
            and not any(a.name == "axis" and a.i != 0 for a in node.attribute)
        ):
            sizes.append(tables[node.input[0]][0])
    return min(sizes) if sizes else None


def _shapes_at(model: onnx.ModelProto, input_name: str, batch: int) -> dict[str, list | None]:
    try:
        return concrete_shapes(model, input_name, batch)
    except ShapeError as error:
        raise invalid("file", f"the graph cannot run on a batch of {batch}: {error}"[:1000]) from None


def _forward_counts(nodes, shapes: dict[str, list | None]) -> tuple[int, int] | None:
    """(elements, FLOPs) of all the node outputs, or None if one's shape is not concrete."""
    elements = flops = 0
    for node in nodes:
        for name in node.output:
            if not name:
                continue
            dims = shapes.get(name)
            if not is_concrete(dims):
                return None
            elements += math.prod(dims)
            flops += math.prod(dims) * _flops_per_element(node, shapes)
    return elements, flops


def fixed_cost(
    model: onnx.ModelProto, light: onnx.ModelProto, inferred: onnx.ModelProto, input_name: str, settings: Settings
) -> FixedCost:
    """The folded constants and the per-pass work of the module docstring; 422 over a folding cap or for a shape unknown.
    `light` is `model` without its large initializers' bytes (weightless_copy), for shape inference."""
    _, folded = constant_names(model.graph)
    from_input = {input_name}
    kinds: list[str] = []  # "folded", "fixed" or "example", per node
    for node, fold in zip(model.graph.node, folded):
        if fold:
            kinds.append("folded")
        elif any(name in from_input for name in node.input if name):
            kinds.append("example")
            from_input.update(name for name in node.output if name)
        else:
            kinds.append("fixed")
    if all(kind == "example" for kind in kinds):
        return FixedCost()
    shapes, types = _shapes_and_types(inferred.graph)
    if any(
        kind != "example" and any(name and not is_concrete(shapes.get(name)) for name in node.output)
        for node, kind in zip(model.graph.node, kinds)
    ):
        try:  # shape arithmetic on constants (pads, reshape targets, Range bounds): evaluate it, then look again
            concrete = concrete_shapes(model, input_name, 1)
        except ShapeError:
            concrete = {}
        shapes |= {name: dims for name, dims in concrete.items() if is_concrete(dims)}
    cost = dict.fromkeys(("constant_bytes", "constant_elements", "folding_flops", "fixed_elements", "fixed_flops"), 0)
    for index, (node, kind) in enumerate(zip(model.graph.node, kinds)):
        if kind == "example":
            continue
        for name in node.output:
            if not name:
                continue
            dims = shapes.get(name)
            if not is_concrete(dims):
                what = (
                    "from constants only, computed once at conversion"
                    if kind == "folded"
                    else "from weights only, on every forward pass"
                )
                raise invalid(
                    f"graph.node.{index}",
                    f"the shape of output {name!r} of {node.op_type} ({node_description(node)}), "
                    f"computed {what}, cannot be inferred ({dims}), so what it costs cannot be bounded; "
                    "export with fixed sizes for everything but the batch axis",
                    value=node.op_type,
                )
            elements = math.prod(dims)
            flops = elements * _flops_per_element(node, shapes)
            if kind == "fixed":
                cost["fixed_elements"] += elements
                cost["fixed_flops"] += flops
                if cost["fixed_flops"] > COUNT_LIMIT:  # the job's estimate would refuse it; stored, it would overflow
                    raise invalid(
                        f"graph.node.{index}",
                        f"{node.op_type} ({node_description(node)}), computed from weights on "
                        f"every forward pass, brings that work to {cost['fixed_flops']} FLOPs per pass",
                        value=node.op_type,
                    )
                continue
            element_type = types.get(name, 0)
            cost["constant_bytes"] += elements * FOLDED_BYTES.get(element_type, 8)
            cost["constant_elements"] += elements if element_type in FLOAT_TYPES else 0
            cost["folding_flops"] += flops
            for total, cap, setting, unit in (
                ("constant_bytes", settings.max_folded_constant_bytes, "max_folded_constant_bytes", "bytes"),
                ("folding_flops", settings.max_folding_flops, "max_folding_flops", "FLOPs"),
            ):
                if cost[total] > cap:
                    _refuse_folding(index, node, name, dims, total, cost[total], cap, setting, unit)
    return FixedCost(**cost)


def _refuse_folding(
    index: int,
    node: onnx.NodeProto,
    name: str,
    dims: list[int],
    total: str,
    value: int,
    cap: float,
    setting: str,
    unit: str,
) -> None:
    what = (
        "the constants it computes once at conversion (floats at 8 bytes, as a float64 job holds them)"
        if total == "constant_bytes"
        else "the work of computing them once at conversion"
    )
    message = (
        f"{node.op_type} ({node_description(node)}), computed from constants only (output {name!r} of shape {dims}), "
        f"brings {what} to {value} {unit}; the cap is {int(cap)} {unit} (setting {setting})"
    )
    raise ProblemError(
        422,
        message,
        type=RESOURCE_CAP,
        title="Request exceeds a resource cap",
        errors=[FieldError(field=f"graph.node.{index}", message=message, limit=int(cap), value=value)],
    )


def _shapes_and_types(graph: onnx.GraphProto) -> tuple[dict[str, list | None], dict[str, int]]:
    values = (*graph.input, *graph.value_info, *graph.output)
    shapes = {value.name: value_dims(value) for value in values}
    shapes |= {tensor.name: list(tensor.dims) for tensor in graph.initializer}
    types = {value.name: value.type.tensor_type.elem_type for value in values if value.type.HasField("tensor_type")}
    types |= {tensor.name: tensor.data_type for tensor in graph.initializer}
    return shapes, types


def _flops_per_element(node: onnx.NodeProto, shapes: dict[str, list | None]) -> int:
    """2·K for MatMul / Gemm (K the input's contracted width) and Conv (K = the weight's dims after the first), else 1."""
    if node.op_type in ("MatMul", "Gemm"):
        first = shapes.get(node.input[0]) or [1]
        transposed = node.op_type == "Gemm" and any(a.name == "transA" and a.i for a in node.attribute)
        width = first[-2] if transposed and len(first) > 1 else first[-1]
        return 2 * width if isinstance(width, int) else 1
    if node.op_type == "Conv":
        weight = shapes.get(node.input[1]) or [1]
        return 2 * math.prod(dim for dim in weight[1:] if isinstance(dim, int))
    return 1


def _parsed(path: Path) -> onnx.ModelProto:
    """The file's ModelProto, parsed from a read-only memory map: the process holds one private copy of the model (the
    parsed one), the file's pages staying in the page cache; 422 for a pickle, a zip archive or bytes that do not parse."""
    model = onnx.ModelProto()
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            raise invalid("file", "the file is empty")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _refuse_code_formats(data[:4])
            try:
                model.ParseFromString(memoryview(data))
            except (DecodeError, ValueError, RuntimeError) as error:
                raise invalid("file", f"not an ONNX model: the protobuf does not parse ({error})") from None
    return model


def _refuse_code_formats(data: bytes) -> None:
    if data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise invalid("file", f"this is a Python pickle, not an ONNX model. {PICKLE_EXPLANATION}")
    if data[:4] == b"PK\x03\x04":
        raise invalid(
            "file", f"this is a zip archive (a torch checkpoint or .pt2?), not an ONNX model. {PICKLE_EXPLANATION}"
        )


def _opset(model: onnx.ModelProto) -> int:
    """The one default-domain opset version, within MIN_OPSET and the newest this onnx knows; 422 otherwise."""
    domains = [entry.domain for entry in model.opset_import]
    foreign = sorted(domain for domain in domains if domain not in DEFAULT_DOMAINS)
    if foreign:
        raise invalid("opset_import", f"operator domains other than the default are not supported: {foreign}")
    if len(domains) != 1:
        raise invalid(
            "opset_import",
            "the model must import exactly one default-domain opset ('' or 'ai.onnx'); "
            f"it imports {len(domains)}: {[(entry.domain, entry.version) for entry in model.opset_import]}",
        )
    version, newest = int(model.opset_import[0].version), onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= version <= newest:
        raise invalid(
            "opset_import", f"opset {version} is outside the supported range {MIN_OPSET}–{newest}", value=version
        )
    return version


def _refuse_outside_references(model: onnx.ModelProto) -> None:
    if model.functions:
        raise invalid("functions", f"model-local functions are not supported ({model.functions[0].name!r})")
    if model.graph.sparse_initializer:
        raise invalid("graph.sparse_initializer", "sparse initializers are not supported")
    tensors = [(f"graph.initializer.{t.name}", t) for t in model.graph.initializer]
    for index, node in enumerate(model.graph.node):
        for attribute in node.attribute:
            if attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                raise invalid(
                    f"graph.node.{index}", f"subgraphs are not supported (node {node.name!r}, {node.op_type})"
                )
            if attribute.type == onnx.AttributeProto.TENSOR:
                tensors.append((f"graph.node.{index}.{attribute.name}", attribute.t))
            if attribute.type in (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.TENSORS):
                raise invalid(
                    f"graph.node.{index}",
                    f"attribute {attribute.name!r}: sparse or tensor-list attributes are not supported",
                )
    for where, tensor in tensors:
        if tensor.data_location == TensorProto.EXTERNAL or tensor.external_data:
            location = next((entry.value for entry in tensor.external_data if entry.key == "location"), "?")
            raise invalid(
                where,
                f"tensor {tensor.name!r} refers to external data ({location!r}); "
                "external-data references are refused: save the model as one file",
                value=location[:200],
            )


def _operators(model: onnx.ModelProto, settings: Settings) -> list[str]:
    nodes, initializers = model.graph.node, len(model.graph.initializer)
    if len(nodes) + initializers > settings.max_model_nodes:
        message = (
            f"the graph has {len(nodes)} nodes and {initializers} initializers ({len(nodes) + initializers} in all); "
            f"the cap is {settings.max_model_nodes} (setting max_model_nodes)"
        )
        raise ProblemError(
            422,
            message,
            type=RESOURCE_CAP,
            title="Request exceeds a resource cap",
            errors=[
                FieldError(
                    field="graph.node", message=message, limit=settings.max_model_nodes, value=len(nodes) + initializers
                )
            ],
        )
    errors = []
    for index, node in enumerate(nodes):
        where = node_description(node)
        if node.domain not in DEFAULT_DOMAINS:
            errors.append(
                FieldError(
                    field=f"graph.node.{index}",
                    message=f"operator {node.domain}.{node.op_type} ({where}) is in a custom domain",
                    value=node.op_type,
                )
            )
        elif node.op_type not in ONNX_OPERATORS:
            errors.append(
                FieldError(
                    field=f"graph.node.{index}",
                    message=f"operator {node.op_type!r} ({where}) is not supported",
                    value=node.op_type,
                )
            )
        else:
            unknown = sorted(a.name for a in node.attribute if a.name not in ONNX_OPERATOR_ATTRIBUTES[node.op_type])
            if unknown:
                errors.append(
                    FieldError(
                        field=f"graph.node.{index}",
                        message=f"operator {node.op_type!r} ({where}): attribute {', '.join(unknown)} is not supported",
                        value=f"{node.op_type}.{unknown[0]}",
                    )
                )
    if errors:
        unsupported = sorted({str(error.value) for error in errors})
        detail = (
            f"unsupported ONNX operators or attributes: {', '.join(unsupported)} (first: {errors[0].message}); "
            f"supported: {', '.join(sorted(ONNX_OPERATORS))} (docs/models.md lists each one's attributes)"
        )
        raise ProblemError(422, detail, type=INVALID_UPLOAD, title="Upload refused", errors=errors[:50])
    return sorted({node.op_type for node in nodes})


def _checked_tensor(tensor: TensorProto, where: str, settings: Settings) -> int:
    """The tensor's element count if it is a trainable parameter (float, ≥ 1 dimension), else 0; refuses bad sizes."""
    if tensor.data_type not in TENSOR_TYPES:
        raise invalid(
            where,
            f"tensor {tensor.name!r} has element type {TensorProto.DataType.Name(tensor.data_type)}; "
            "float16/32/64, int32/64 and bool only",
        )
    if any(dim < 0 for dim in tensor.dims):
        raise invalid(where, f"tensor {tensor.name!r} declares a negative dimension {list(tensor.dims)}")
    elements = math.prod(tensor.dims)
    declared = elements * TENSOR_TYPES[tensor.data_type]
    if declared > settings.max_upload_bytes:
        raise too_large(declared, settings.max_upload_bytes, f"declares a tensor ({tensor.name!r}) of")
    if tensor.HasField("raw_data"):
        held = len(tensor.raw_data)
        if held != declared:
            raise invalid(
                where, f"tensor {tensor.name!r} declares {declared} bytes ({list(tensor.dims)}) but holds {held}"
            )
    else:
        held = sum(len(getattr(tensor, name)) for name in TYPED_FIELDS)
        if tensor.data_type == TensorProto.FLOAT16:
            held = len(tensor.int32_data)
        if held != elements:
            raise invalid(
                where, f"tensor {tensor.name!r} declares {elements} values ({list(tensor.dims)}) but holds {held}"
            )
    return elements if tensor.data_type in FLOAT_TYPES and len(tensor.dims) >= 1 else 0


def _tensor_info(value: onnx.ValueInfoProto) -> dict:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise invalid(f"graph.io.{value.name}", f"{value.name!r} is a {kind}; only tensors are supported")
    tensor = value.type.tensor_type
    shape: list[int | str] = []
    for dim in tensor.shape.dim:
        which = dim.WhichOneof("value")
        shape.append(int(dim.dim_value) if which == "dim_value" else (dim.dim_param or "?"))
    dtype = TYPE_NAMES.get(tensor.elem_type, TensorProto.DataType.Name(tensor.elem_type).lower())
    return {"name": value.name, "dtype": dtype, "shape": shape}


def _check_signature(inputs: list[dict], outputs: list[dict]) -> None:
    if len(inputs) != 1:
        raise invalid(
            "graph.input",
            f"the model must take exactly one input; it takes {len(inputs)}: {[i['name'] for i in inputs]}",
        )
    if len(outputs) != 1:
        raise invalid("graph.output", f"the model must give exactly one output; it gives {len(outputs)}")
    (given,), (answer,) = inputs, outputs
    if given["dtype"] not in ("float32", "float64", "float16", "int64", "int32"):
        raise invalid(
            "graph.input", f"input {given['name']!r} is {given['dtype']}; a float or integer tensor is needed"
        )
    if len(given["shape"]) < 2 or isinstance(given["shape"][0], int):
        raise invalid(
            "graph.input",
            f"input {given['name']!r} has shape {given['shape']}: it must be [batch, ...] with a "
            "symbolic batch axis (export with dynamic_axes={'x': {0: 'batch'}})",
        )
    if answer["dtype"] not in ("float32", "float64", "float16"):
        raise invalid("graph.output", f"output {answer['name']!r} is {answer['dtype']}; a float tensor is needed")
    if len(answer["shape"]) != 2 or not isinstance(answer["shape"][1], int) or answer["shape"][1] < 1:
        raise invalid(
            "graph.output",
            f"output {answer['name']!r} has shape {answer['shape']}: it must be [batch, O] with a fixed O",
        )

"""What the API answers for uploads: data sets (POST /v1/datasets) and ONNX models (POST /v1/models).

An upload is stored once per owner and content: uploading the same arrays (or the same
ONNX file) again answers the resource made the first time (200 instead of 201).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field

from ntklab.api_schemas.onnx_operators import ONNX_OPERATOR_ATTRIBUTES
from ntklab.api_schemas.resources import Resource

INVALID_UPLOAD = "urn:ntklab:problem:invalid-upload"
"""422: the uploaded file is malformed, unsafe or unsupported; `errors` names the part and the reason."""

ONNX_OPERATORS = frozenset(ONNX_OPERATOR_ATTRIBUTES)
"""The ONNX operators (default domain) an uploaded model may use: exactly the worker's converter table
(api_schemas/onnx_operators.py, generated from engine/nets/onnx_ops/, lists each one's attributes)."""

ONNX_CONSTANT_INPUTS: dict[str, tuple[int, ...]] = {
    "BatchNormalization": (3, 4),
    "Clip": (1, 2),
    "Pad": (2,),
    "Resize": (1, 2),
    "Range": (0, 1, 2),
}
"""Initializer inputs that stay constants, by operator and input index: a batch norm's running mean and variance,
clamp bounds, a pad value, Resize's roi and scales, Range's bounds (torch exports these from Python numbers)."""

FLOAT_ELEMENT_TYPES = (1, 10, 11)
"""onnx.TensorProto's FLOAT, FLOAT16 and DOUBLE."""


def trainable_initializers(graph) -> list[tuple[str, list[int]]]:
    """(name, shape) of the trainable parameters of an ONNX graph, in initializer order.

    `graph` is an onnx.GraphProto (read duck-typed: `.node[i].op_type/.input`, `.initializer[j].name/.dims/
    .data_type`, so this module needs no onnx). Trainable: a floating-point initializer with at least one
    dimension that feeds some input other than ONNX_CONSTANT_INPUTS (a batch norm's running statistics are
    constants: the network as it predicts). Scalar, integer and boolean initializers and Constant nodes are
    constants. The SDK, the API's upload check and the worker's converter all count with this rule.
    """
    constant, used = set(), set()
    for node in graph.node:
        kept = ONNX_CONSTANT_INPUTS.get(node.op_type, ())
        for index, name in enumerate(node.input):
            (constant if index in kept else used).add(name)
    frozen = constant - used
    return [
        (t.name, [int(d) for d in t.dims])
        for t in graph.initializer
        if t.data_type in FLOAT_ELEMENT_TYPES and len(t.dims) >= 1 and t.name not in frozen
    ]


def constant_names(graph) -> tuple[set[str], list[bool]]:
    """The values of an ONNX graph known before any input arrives, and for each node (graph order) whether it is folded.

    Constants: the initializers that are not trainable (trainable_initializers) and the outputs of folded nodes. A
    node is folded when every input it names is a constant (a node without inputs, Constant, always is): the
    worker's converter computes it once, at conversion, and keeps its outputs as constants (engine/nets/
    onnx_model.py), and the API's upload check (service/onnx_upload.py) costs and bounds that folding with this
    same rule. `graph` is read duck-typed (an onnx.GraphProto), nodes in topological order as ONNX requires.
    """
    trainable = {name for name, _ in trainable_initializers(graph)}
    constants = {t.name for t in graph.initializer if t.name not in trainable}
    folded = []
    for node in graph.node:
        fold = all(not name or name in constants for name in node.input)
        if fold:
            constants.update(name for name in node.output if name)
        folded.append(fold)
    return constants, folded


def node_description(node) -> str:
    """'node NAME, module /a/b/c' for an onnx.NodeProto (read duck-typed): the torch module path where the exporter
    recorded it (the TorchScript exporter names nodes '/a/b.0/c/Op', the dynamo exporter records
    'pkg.torch.onnx.name_scopes'), for errors a user can act on."""
    path = None
    scopes = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), None)
    if scopes:
        path = "/" + "/".join(part.strip(" '\"") for part in scopes.strip("[]").split(",") if part.strip(" '\""))
    elif node.name.startswith("/") and node.name.count("/") > 1:
        path = node.name.rsplit("/", 1)[0]
    return f"node {node.name!r}" + (f", module {path}" if path else "")


class ArrayInfo(Resource):
    """One stored array: its shape (points first), dtype and the SHA-256 of its .npy bytes."""

    shape: list[int]
    dtype: str = Field(description="numpy dtype name: float64, float32, float16, int64, int32, …, uint8")
    sha256: str


class Dataset(Resource):
    """An uploaded data set: x [points, ...] and y [points] or [points, O].

    Use it in a job with `data: {"kind": "dataset", "id": ..., "n_train": ...}`.
    """

    id: str
    object: Literal["dataset"] = "dataset"
    name: str | None
    points: int
    x: ArrayInfo
    y: ArrayInfo
    size: int = Field(description="bytes stored (the two .npy files)")
    created_at: dt.datetime


class DatasetPage(Resource):
    object: Literal["list"] = "list"
    data: list[Dataset]
    has_more: bool
    next: str | None = Field(description="opaque cursor for the next page, null on the last page")


class TensorInfo(Resource):
    """A graph input or output: name, element type and shape (a dimension is an int or a symbolic name)."""

    name: str
    dtype: str
    shape: list[int | str]


class TrainableTensor(Resource):
    """One trainable parameter of an uploaded model: the initializer's name and shape."""

    name: str
    shape: list[int]


class Model(Resource):
    """An uploaded ONNX model, parsed (never run): use it with `model: {"kind": "onnx", "id": ...}`.

    Its floating-point initializers with at least one dimension become the trainable
    parameters (standard parameterization: the weights are the ones exported), except a batch
    norm's running statistics, which stay constants; `trainable` lists them.
    """

    id: str
    object: Literal["model"] = "model"
    name: str | None
    format: Literal["onnx"] = "onnx"
    sha256: str
    size: int = Field(description="bytes of the ONNX file")
    parameters: int = Field(description="trainable parameters: elements of the floating-point initializers")
    trainable: list[TrainableTensor] | None = Field(
        default=None,
        description="the trainable initializers (name, shape) in graph order, to check against "
        "the module's parameters; null for models uploaded before this field existed",
    )
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    operators: list[str] = Field(description="the ONNX operator types the graph uses, sorted")
    opset: int
    created_at: dt.datetime


class ModelPage(Resource):
    object: Literal["list"] = "list"
    data: list[Model]
    has_more: bool
    next: str | None = Field(description="opaque cursor for the next page, null on the last page")

"""What the API answers for uploads: data sets (POST /v1/datasets) and ONNX models (POST /v1/models).

An upload is stored once per owner and content: uploading the same arrays (or the same
ONNX file) again answers the resource made the first time (200 instead of 201).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field

from api_schemas.resources import Resource

INVALID_UPLOAD = "urn:ntklab:problem:invalid-upload"
"""422: the uploaded file is malformed, unsafe or unsupported; `errors` names the part and the reason."""

ONNX_OPERATORS = frozenset({
    "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Neg", "Pow", "Sqrt", "Exp", "Log",
    "Relu", "LeakyRelu", "Tanh", "Sigmoid", "Softplus", "Erf", "Gelu", "Softmax", "LogSoftmax",
    "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "LayerNormalization", "BatchNormalization",
    "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Gather", "ReduceMean", "ReduceSum",
    "Identity", "Dropout", "Constant", "Cast", "Shape",
})
"""The ONNX operators (default domain) an uploaded model may use: the worker converts exactly these to torch.

Shape reads the (per-point, batch included) shape of a tensor for Reshape targets such as
x.view(x.size(0), -1); Conv and the pools are 2-D.
"""

ONNX_CONSTANT_INPUTS: dict[str, tuple[int, ...]] = {"BatchNormalization": (3, 4)}
"""Initializer inputs that stay constants (a batch norm's running mean and variance), by operator and input index.

Every other floating-point initializer with at least one dimension is a trainable parameter;
scalar initializers (0-d) and Constant nodes are constants.
"""


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


class Model(Resource):
    """An uploaded ONNX model, parsed (never run): use it with `model: {"kind": "onnx", "id": ...}`.

    Its floating-point initializers with at least one dimension become the trainable
    parameters (standard parameterization: the weights are the ones exported).
    """

    id: str
    object: Literal["model"] = "model"
    name: str | None
    format: Literal["onnx"] = "onnx"
    sha256: str
    size: int = Field(description="bytes of the ONNX file")
    parameters: int = Field(description="trainable parameters: elements of the floating-point initializers")
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


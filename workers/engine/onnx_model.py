"""An uploaded ONNX model as a torch module: a narrow converter over api_schemas.uploads.ONNX_OPERATORS.

    net = build_onnx_network(model_spec, onnx_bytes, dtype=torch.float64)
    net(x) = f(w; x) ∈ R^O    (logits, [n, O])      net.outputs(x) = φ(f)    (the spec's head)

The graph is parsed (onnx protobuf, nothing run by onnx) and each node becomes one step of
`OnnxNetwork.forward`, in the graph's topological order. Weights (standard parameterization:
the values exported, multiplier 1):

    Gemm (B an initializer, alpha = beta = 1, transA = 0)      → ScaledLinear, W = B or Bᵀ, b = C
    MatMul by an initializer, then Add of a 1-D initializer    → ScaledLinear, W = Bᵀ, b = the addend
    Conv (2-D, weight an initializer, groups 1, dilation 1,
          square kernel, equal strides, equal pads)           → ScaledConv2d
    every other floating-point initializer with ≥ 1 dimension → a parameter in `weights`

so the structured tangent kernel (workers.engine.ntk) applies whenever every weight sits in
a Linear or Conv layer; otherwise `auto` picks the jacobian method. Running statistics of a
batch norm, scalar initializers and Constant nodes are constants (buffers). Casts to a float
type cast to the network's dtype, so a float64 job stays float64 throughout.

Hidden representations α^(l) (layer sensitivity) are the outputs of the activation nodes
(Relu, Tanh, Sigmoid, Softplus, Gelu, LeakyRelu) that are not the graph's output; a graph
without one has the input of its last Gemm / MatMul / Conv as its one hidden representation.
An operator variant this module does not implement raises OnnxConversionError naming the node.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, numpy_helper
from torch import Tensor, nn

from api_schemas.spec import ModelSpec
from api_schemas.uploads import ONNX_CONSTANT_INPUTS, ONNX_OPERATORS
from workers.engine.activations import apply_head
from workers.engine.layers import ScaledConv2d, ScaledLinear

ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Softplus", "Gelu", "LeakyRelu")
LAYERS = ("Gemm", "MatMul", "Conv")
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16)
INTEGER_TYPES = {TensorProto.INT64: torch.int64, TensorProto.INT32: torch.int32, TensorProto.BOOL: torch.bool}


class OnnxConversionError(ValueError):
    """The ONNX graph uses something this converter does not implement; the message names the node."""


@dataclass
class Step:
    """One node: `run(*inputs)` maps its input tensors (None for an omitted optional input) to its first output."""

    op: str
    inputs: list[str]
    output: str
    run: Callable[..., Tensor]


class OnnxNetwork(nn.Module):
    """f(w; x) of an uploaded ONNX graph; `layers` hold the Linear/Conv weights, `weights` the other parameters."""

    def __init__(self, model: ModelSpec, graph: onnx.GraphProto, opset: int, dtype: torch.dtype, device) -> None:
        super().__init__()
        self.head = model.output_activation
        self.output_dim = model.output_dim
        self.kind = "onnx"
        self.parameterization = "standard"
        self.float_dtype = dtype
        self.opset = opset
        self.layers = nn.ModuleList()
        self.weights = nn.ParameterDict()
        self.constants = nn.Module()
        self._names: dict[str, tuple[str, str]] = {}
        self._values: dict[str, np.ndarray] = {}
        inputs = [value.name for value in graph.input if value.name not in {t.name for t in graph.initializer}]
        self.input_name, self.output_name = inputs[0], graph.output[0].name
        self.steps: list[Step] = []
        _Converter(self, graph, dtype, device).convert()
        self.to(device=device)

    # ---- tensors by ONNX name

    def add_weight(self, name: str, value: np.ndarray, dtype: torch.dtype, device) -> None:
        key = _key(name, self._names)
        self.weights[key] = nn.Parameter(torch.tensor(value, dtype=dtype, device=device))
        self._names[name] = ("weights", key)

    def add_constant(self, name: str, value: np.ndarray, device) -> None:
        key = _key(name, self._names)
        tensor = torch.as_tensor(np.array(value, copy=True), device=device)
        if tensor.is_floating_point():
            tensor = tensor.to(self.float_dtype)
        self.constants.register_buffer(key, tensor)
        self._names[name] = ("constants", key)
        self._values[name] = value

    def tensor(self, name: str) -> Tensor:
        where, key = self._names[name]
        return self.weights[key] if where == "weights" else getattr(self.constants, key)

    def constant_value(self, name: str) -> np.ndarray | None:
        """The value of a constant (initializer or Constant node) known when converting, else None."""
        return self._values.get(name)

    # ---- the network interface of workers.engine.nets.Network

    def forward(self, x: Tensor) -> Tensor:
        """Logits f(w; x), [n, O]."""
        return self._run(x, None)

    def outputs(self, x: Tensor) -> Tensor:
        """φ(f(w; x)), [n, O]."""
        return apply_head(self.head, self.forward(x))

    def forward_with_hidden(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Logits and the outputs of the activation nodes (α^(1..L)), in execution order."""
        hidden: list[Tensor] = []
        return self._run(x, hidden), hidden

    def _run(self, x: Tensor, hidden: list[Tensor] | None) -> Tensor:
        env: dict[str, Tensor] = {self.input_name: x}
        readout_input = None
        for step in self.steps:
            args = [None if not name else env[name] if name in env else self.tensor(name) for name in step.inputs]
            env[step.output] = step.run(*args)
            if hidden is not None and step.op in ACTIVATIONS and step.output != self.output_name:
                hidden.append(env[step.output])
            if step.op in LAYERS and step.inputs[0] != self.input_name:
                readout_input = args[0]
        if hidden == [] and readout_input is not None and readout_input.is_floating_point():
            hidden.append(readout_input)
        return env[self.output_name]


def build_onnx_network(
    model: ModelSpec, onnx_bytes: bytes, *, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> OnnxNetwork:
    """The torch module of an uploaded ONNX model, its weights cast to `dtype` and trainable."""
    proto = onnx.ModelProto()
    proto.ParseFromString(onnx_bytes)
    if any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer):
        raise OnnxConversionError("external-data references are not supported")
    opset = next((entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx")), 0)
    return OnnxNetwork(model, proto.graph, int(opset), dtype, device)


def _key(name: str, taken: dict) -> str:
    key = re.sub(r"\W", "_", name) or "t"
    key = key if not key[0].isdigit() else f"t_{key}"
    used = {k for _, k in taken.values()}
    candidate, suffix = key, 1
    while candidate in used:
        candidate, suffix = f"{key}_{suffix}", suffix + 1
    return candidate


class _Converter:
    def __init__(self, net: OnnxNetwork, graph: onnx.GraphProto, dtype: torch.dtype, device) -> None:
        self.net, self.graph, self.dtype, self.device = net, graph, dtype, device
        self.initializers = {t.name: t for t in graph.initializer}
        self.uses: dict[str, int] = {}
        for node in graph.node:
            for name in node.input:
                self.uses[name] = self.uses.get(name, 0) + 1
        self.constant_inputs = self._constant_inputs()
        self.absorbed: set[str] = set()

    def _constant_inputs(self) -> set[str]:
        constant, trainable = set(), set()
        for node in self.graph.node:
            kept = ONNX_CONSTANT_INPUTS.get(node.op_type, ())
            for index, name in enumerate(node.input):
                (constant if index in kept else trainable).add(name)
        return constant - trainable

    def convert(self) -> None:
        nodes = list(self.graph.node)
        skip: set[int] = set()
        for index, node in enumerate(nodes):
            if index in skip:
                continue
            if node.op_type not in ONNX_OPERATORS or node.domain not in ("", "ai.onnx"):
                raise OnnxConversionError(f"operator {node.domain + '.' if node.domain else ''}{node.op_type} (node {node.name!r}) is not supported")
            fused = self._fused_matmul_add(node, nodes, index)
            if fused is not None:
                skip.add(fused)
                continue
            self.net.steps.append(self._step(node))
        for name, tensor in self.initializers.items():
            if name in self.absorbed:
                continue
            value = numpy_helper.to_array(tensor)
            if tensor.data_type in FLOAT_TYPES and value.ndim >= 1 and name not in self.constant_inputs:
                self.net.add_weight(name, value, self.dtype, self.device)
            else:
                self.net.add_constant(name, value, self.device)

    # ---- Linear and Conv layers owned by ScaledLinear / ScaledConv2d

    def _owned(self, name: str, ndim: int) -> np.ndarray | None:
        tensor = self.initializers.get(name)
        if tensor is None or tensor.data_type not in FLOAT_TYPES or self.uses.get(name, 0) != 1 or name in self.constant_inputs:
            return None
        value = numpy_helper.to_array(tensor)
        return value if value.ndim == ndim else None

    def _layer_step(self, node, layer: nn.Module, output: str, names: list[str]) -> Step:
        self.absorbed.update(names)
        self.net.layers.append(layer)
        index = len(self.net.layers) - 1
        net = self.net
        return Step(node.op_type, [node.input[0]], output, lambda x: net.layers[index](x))

    def _linear(self, weight: np.ndarray, bias: np.ndarray | None) -> ScaledLinear:
        layer = ScaledLinear(weight.shape[1], weight.shape[0], bias=bias is not None, weight_multiplier=1.0,
                             dtype=self.dtype, device=self.device)
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(weight))
            if bias is not None:
                layer.bias.copy_(torch.tensor(bias))
        return layer

    def _gemm_layer(self, node, attributes: dict) -> Step | None:
        if attributes.get("transA", 0) or attributes.get("alpha", 1.0) != 1.0 or attributes.get("beta", 1.0) != 1.0:
            return None
        weight = self._owned(node.input[1], 2)
        if weight is None:
            return None
        weight = weight if attributes.get("transB", 0) else weight.T
        bias = None
        if len(node.input) > 2 and node.input[2]:
            bias = self._owned(node.input[2], 1)
            if bias is None or bias.shape[0] != weight.shape[0]:
                return None
        names = [node.input[1]] + ([node.input[2]] if bias is not None else [])
        return self._layer_step(node, self._linear(weight, bias), node.output[0], names)

    def _fused_matmul_add(self, node, nodes, index: int) -> int | None:
        """MatMul(x, B) followed by Add(·, b) with B, b initializers → one ScaledLinear; returns the Add's index."""
        if node.op_type != "MatMul" or self.uses.get(node.output[0], 0) != 1:
            return None
        weight = self._owned(node.input[1], 2)
        if weight is None:
            return None
        for later in range(index + 1, len(nodes)):
            add = nodes[later]
            if node.output[0] not in add.input:
                continue
            if add.op_type != "Add" or len(add.input) != 2:
                return None
            other = add.input[1] if add.input[0] == node.output[0] else add.input[0]
            bias = self._owned(other, 1)
            if bias is None or bias.shape[0] != weight.shape[1]:
                return None
            self.net.steps.append(self._layer_step(node, self._linear(weight.T, bias), add.output[0], [node.input[1], other]))
            return later
        return None

    def _conv_layer(self, node, attributes: dict) -> Step | None:
        weight = self._owned(node.input[1], 4)
        if weight is None:
            return None
        k = weight.shape[2]
        strides = attributes.get("strides", [1, 1])
        pads = attributes.get("pads", [0, 0, 0, 0])
        if (weight.shape[3] != k or attributes.get("group", 1) != 1 or any(d != 1 for d in attributes.get("dilations", [1, 1]))
                or len(set(strides)) != 1 or len(set(pads)) != 1 or attributes.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")):
            return None
        bias = None
        if len(node.input) > 2 and node.input[2]:
            bias = self._owned(node.input[2], 1)
            if bias is None:
                return None
        layer = ScaledConv2d(weight.shape[1], weight.shape[0], k, stride=strides[0], padding=pads[0], bias=bias is not None,
                             weight_multiplier=1.0, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(weight))
            if bias is not None:
                layer.bias.copy_(torch.tensor(bias))
        names = [node.input[1]] + ([node.input[2]] if bias is not None else [])
        return self._layer_step(node, layer, node.output[0], names)

    # ---- every other node

    def _step(self, node) -> Step:
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        op = node.op_type
        for extra in node.output[1:]:
            if extra and self.uses.get(extra):
                raise OnnxConversionError(f"node {node.name!r} ({op}): only its first output may be used")
        if op == "Gemm" and (layer := self._gemm_layer(node, attributes)) is not None:
            return layer
        if op == "Conv" and (layer := self._conv_layer(node, attributes)) is not None:
            return layer
        if op == "Constant":
            self.net.add_constant(node.output[0], _constant_value(node, attributes), self.device)
            return Step(op, [node.output[0]], node.output[0], lambda value: value)
        make = getattr(self, f"_op_{op}", None)
        if make is None:
            raise OnnxConversionError(f"operator {op} (node {node.name!r}) is not supported")
        try:
            run = make(node, attributes)
        except OnnxConversionError as error:
            raise OnnxConversionError(f"node {node.name!r} ({op}): {error}") from None
        return Step(op, list(node.input), node.output[0], run)

    def _known(self, node, index: int, what: str) -> list[int] | None:
        """An input that must be known when converting (axes, a shape given as a constant), as a list of ints."""
        if len(node.input) <= index or not node.input[index]:
            return None
        name = node.input[index]
        if name in self.initializers:
            return [int(v) for v in numpy_helper.to_array(self.initializers[name]).reshape(-1)]
        value = self.net.constant_value(name)
        if value is None:
            raise OnnxConversionError(f"{what} must be a constant")
        return [int(v) for v in np.asarray(value).reshape(-1)]

    def _op_Gemm(self, node, a):
        alpha, beta, trans_a, trans_b = a.get("alpha", 1.0), a.get("beta", 1.0), a.get("transA", 0), a.get("transB", 0)

        def gemm(x, w, c=None):
            y = alpha * ((x.T if trans_a else x) @ (w.T if trans_b else w))
            return y if c is None else y + beta * c

        return gemm

    def _op_MatMul(self, node, a):
        return torch.matmul

    def _op_Add(self, node, a):
        return torch.add

    def _op_Sub(self, node, a):
        return torch.sub

    def _op_Mul(self, node, a):
        return torch.mul

    def _op_Div(self, node, a):
        return lambda x, y: torch.div(x, y, rounding_mode="trunc") if not x.is_floating_point() else x / y

    def _op_Neg(self, node, a):
        return torch.neg

    def _op_Pow(self, node, a):
        return lambda x, y: torch.pow(x, y.to(x.dtype) if x.is_floating_point() else y)

    def _op_Sqrt(self, node, a):
        return torch.sqrt

    def _op_Exp(self, node, a):
        return torch.exp

    def _op_Log(self, node, a):
        return torch.log

    def _op_Relu(self, node, a):
        return torch.relu

    def _op_LeakyRelu(self, node, a):
        slope = a.get("alpha", 0.01)
        return lambda x: F.leaky_relu(x, slope)

    def _op_Tanh(self, node, a):
        return torch.tanh

    def _op_Sigmoid(self, node, a):
        return torch.sigmoid

    def _op_Softplus(self, node, a):
        return F.softplus

    def _op_Erf(self, node, a):
        return torch.erf

    def _op_Gelu(self, node, a):
        approximate = a.get("approximate", b"none")
        approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
        return lambda x: F.gelu(x, approximate=approximate)

    def _softmax(self, a, function):
        if self.net.opset >= 13:
            axis = a.get("axis", -1)
            return lambda x: function(x, dim=axis)
        axis = a.get("axis", 1)

        def coerced(x):
            rows = math.prod(x.shape[: axis % x.dim()])
            return function(x.reshape(rows, -1), dim=1).reshape(x.shape)

        return coerced

    def _op_Softmax(self, node, a):
        return self._softmax(a, torch.softmax)

    def _op_LogSoftmax(self, node, a):
        return self._softmax(a, torch.log_softmax)

    def _op_Conv(self, node, a):
        dilations, group = a.get("dilations", [1, 1]), a.get("group", 1)
        strides, pads = a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0])
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise OnnxConversionError("auto_pad is not supported; export with explicit pads")
        if len(strides) != 2:
            raise OnnxConversionError("only 2-D convolutions are supported")

        def conv(x, w, b=None):
            x = F.pad(x, (pads[1], pads[3], pads[0], pads[2])) if any(pads) else x
            return F.conv2d(x, w, b, stride=strides, dilation=dilations, groups=group)

        return conv

    def _pool_pads(self, a) -> tuple[list[int], list[int], list[int]]:
        kernel = a["kernel_shape"]
        if len(kernel) != 2:
            raise OnnxConversionError("only 2-D pooling is supported")
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise OnnxConversionError("auto_pad is not supported; export with explicit pads")
        pads = a.get("pads", [0, 0, 0, 0])
        if pads[0] != pads[2] or pads[1] != pads[3]:
            raise OnnxConversionError("asymmetric pooling pads are not supported")
        return kernel, a.get("strides", [1, 1]), pads[:2]

    def _op_MaxPool(self, node, a):
        kernel, strides, pads = self._pool_pads(a)
        dilations, ceil = a.get("dilations", [1, 1]), bool(a.get("ceil_mode", 0))
        return lambda x: F.max_pool2d(x, kernel, strides, pads, dilations, ceil_mode=ceil)

    def _op_AveragePool(self, node, a):
        kernel, strides, pads = self._pool_pads(a)
        include, ceil = bool(a.get("count_include_pad", 0)), bool(a.get("ceil_mode", 0))
        return lambda x: F.avg_pool2d(x, kernel, strides, pads, ceil_mode=ceil, count_include_pad=include)

    def _op_GlobalAveragePool(self, node, a):
        return lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True)

    def _op_LayerNormalization(self, node, a):
        axis, eps = a.get("axis", -1), a.get("epsilon", 1e-5)

        def layer_norm(x, scale, bias=None):
            return F.layer_norm(x, x.shape[axis % x.dim():], scale, bias, eps)

        return layer_norm

    def _op_BatchNormalization(self, node, a):
        eps = a.get("epsilon", 1e-5)
        if a.get("training_mode", 0):
            raise OnnxConversionError("training_mode batch normalization is not supported (export in eval mode)")

        def batch_norm(x, scale, bias, mean, var):
            shape = (1, -1) + (1,) * (x.dim() - 2)
            return (x - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(shape)

        return batch_norm

    def _op_Flatten(self, node, a):
        axis = a.get("axis", 1)
        return lambda x: x.reshape(math.prod(x.shape[: axis % (x.dim() + 1)]), -1)

    def _op_Reshape(self, node, a):
        allowzero = a.get("allowzero", 0)
        name = node.input[1]
        known = name in self.initializers or self.net.constant_value(name) is not None
        fixed = self._known(node, 1, "the target shape") if known else None

        def reshape(x, shape):
            target = fixed if fixed is not None else [int(v) for v in shape.tolist()]
            if not allowzero:
                target = [x.shape[i] if v == 0 else v for i, v in enumerate(target)]
            return x.reshape(target)

        return reshape

    def _op_Shape(self, node, a):
        start, end = a.get("start", 0), a.get("end")
        return lambda x: torch.tensor(list(x.shape)[start:end], dtype=torch.int64, device=x.device)

    def _op_Transpose(self, node, a):
        perm = a.get("perm")
        return lambda x: x.permute(perm if perm is not None else list(reversed(range(x.dim()))))

    def _axes(self, node, a) -> list[int] | None:
        return a.get("axes") if "axes" in a else self._known(node, 1, "axes")

    def _op_Squeeze(self, node, a):
        axes = self._axes(node, a)

        def squeeze(x, _axes=None):
            if axes is None:
                return x.squeeze()
            return x.squeeze(tuple(axis % x.dim() for axis in axes))

        return squeeze

    def _op_Unsqueeze(self, node, a):
        axes = self._axes(node, a)
        if axes is None:
            raise OnnxConversionError("axes are required")

        def unsqueeze(x, _axes=None):
            rank = x.dim() + len(axes)
            for axis in sorted(axis % rank for axis in axes):
                x = x.unsqueeze(axis)
            return x

        return unsqueeze

    def _op_Concat(self, node, a):
        axis = a["axis"]
        return lambda *xs: torch.cat(xs, dim=axis)

    def _op_Gather(self, node, a):
        axis = a.get("axis", 0)

        def gather(data, indices):
            indices = indices.long()
            size = data.shape[axis]
            indices = torch.where(indices < 0, indices + size, indices)
            if axis == 0 and data.dim() == 2 and data.is_floating_point():
                return F.embedding(indices, data)
            picked = data.index_select(axis, indices.reshape(-1))
            return picked.reshape((*data.shape[:axis], *indices.shape, *data.shape[axis % data.dim() + 1:]))

        return gather

    def _reduce(self, node, a, function):
        keepdims, noop = bool(a.get("keepdims", 1)), a.get("noop_with_empty_axes", 0)
        axes = self._axes(node, a)

        def reduce(x, _axes=None):
            if not axes:
                return x if noop else function(x, dim=tuple(range(x.dim())), keepdim=keepdims)
            return function(x, dim=tuple(axes), keepdim=keepdims)

        return reduce

    def _op_ReduceMean(self, node, a):
        return self._reduce(node, a, torch.mean)

    def _op_ReduceSum(self, node, a):
        return self._reduce(node, a, torch.sum)

    def _op_Identity(self, node, a):
        return lambda x: x

    def _op_Dropout(self, node, a):
        return lambda x, *_: x

    def _op_Cast(self, node, a):
        to = a["to"]
        if to in FLOAT_TYPES:
            net = self.net
            return lambda x: x.to(net.float_dtype)
        if to not in INTEGER_TYPES:
            raise OnnxConversionError(f"Cast to {TensorProto.DataType.Name(to)} is not supported")
        return lambda x: x.to(INTEGER_TYPES[to])


def _constant_value(node, attributes: dict) -> np.ndarray:
    if "value" in attributes:
        return numpy_helper.to_array(attributes["value"])
    for name, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64), ("value_ints", np.int64)):
        if name in attributes:
            return np.asarray(attributes[name], dtype=dtype)
    raise OnnxConversionError(f"Constant node {node.name!r}: only tensor, float(s) and int(s) values are supported")

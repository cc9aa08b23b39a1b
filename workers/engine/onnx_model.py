"""An uploaded ONNX model as a torch module, converted node by node through the operator table (onnx_ops/).

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

so the structured tangent kernel (workers.engine.ntk) covers the Linear and Conv layers and
the rest are its fallback parameters. Running statistics of a batch norm
(api_schemas.uploads.trainable_initializers), scalar and integer initializers and Constant
nodes are constants (buffers). A node whose inputs are all constants (shape arithmetic,
masks, rotary tables) is computed once, here, and its outputs are constants too. Casts to a
float type cast to the network's dtype, so a float64 job stays float64 throughout.

Hidden representations α^(l) (layer sensitivity) are the outputs of the activation nodes
(onnx_ops.activations.ACTIVATIONS) that are not the graph's output; a graph without one has
the input of its last Gemm / MatMul / Conv as its one hidden representation. An operator,
attribute or variant the table does not implement raises OnnxConversionError naming the node
and, where the exporter recorded it, the torch module it came from.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import torch
from onnx import TensorProto, numpy_helper
from torch import Tensor, nn

from api_schemas.spec import ModelSpec
from api_schemas.uploads import node_description, trainable_initializers
from workers.engine.activations import apply_head
from workers.engine.layers import ScaledConv2d, ScaledLinear
from workers.engine.onnx_ops.activations import ACTIVATIONS
from workers.engine.onnx_ops.registry import Node, OnnxConversionError, decoded_attributes, table

LAYERS = ("Gemm", "MatMul", "Conv")

__all__ = ["OnnxConversionError", "OnnxNetwork", "build_onnx_network"]


@dataclass
class Step:
    """One node: `run(*inputs)` maps its input tensors (None for an omitted optional input) to its output, or a tuple of outputs."""

    op: str
    inputs: list[str]
    outputs: list[str]
    run: Callable[..., Tensor | tuple[Tensor, ...]]


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
            result = step.run(*args)
            for name, value in zip(step.outputs, result if isinstance(result, tuple) else (result,)):
                if name:
                    env[name] = value
            output = step.outputs[0]
            if hidden is not None and step.op in ACTIVATIONS and output != self.output_name:
                hidden.append(env[output])
            if step.op in LAYERS and step.inputs[0] != self.input_name:
                readout_input = args[0]
        if hidden == [] and readout_input is not None and readout_input.is_floating_point():
            hidden.append(readout_input)
        return env[self.output_name] if self.output_name in env else self.tensor(self.output_name)


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
        self.table = table()
        self.initializers = {t.name: t for t in graph.initializer}
        self.uses: dict[str, int] = {}
        for node in graph.node:
            for name in node.input:
                self.uses[name] = self.uses.get(name, 0) + 1
        self.trainable = {name for name, _ in trainable_initializers(graph)}
        self.absorbed: set[str] = set()

    def _trainable(self, tensor: TensorProto) -> bool:
        return tensor.name in self.trainable

    def convert(self) -> None:
        for name, tensor in self.initializers.items():
            if not self._trainable(tensor):
                self.net.add_constant(name, numpy_helper.to_array(tensor), self.device)
        nodes = list(self.graph.node)
        skip: set[int] = set()
        for index, node in enumerate(nodes):
            if index in skip:
                continue
            fused = self._fused_matmul_add(node, nodes, index)
            if fused is not None:
                skip.add(fused)
                continue
            layer = self._layer(node)
            if layer is not None:
                self.net.steps.append(layer)
                continue
            step = self._step(node)
            if not self._fold(step):
                self.net.steps.append(step)
        for name, tensor in self.initializers.items():
            if name not in self.absorbed and self._trainable(tensor):
                self.net.add_weight(name, numpy_helper.to_array(tensor), self.dtype, self.device)

    def _layer(self, node: onnx.NodeProto) -> Step | None:
        """A Gemm or Conv by an initializer used once, as a layer the structured kernel covers; else None."""
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Gemm", "Conv"):
            return None
        attributes = decoded_attributes(node)
        known = self.table[node.op_type].attributes
        if any(name not in known for name in attributes):
            return None  # _step refuses it by name
        return self._gemm_layer(node, attributes) if node.op_type == "Gemm" else self._conv_layer(node, attributes)

    # ---- Linear and Conv layers owned by ScaledLinear / ScaledConv2d

    def _owned(self, name: str, ndim: int) -> np.ndarray | None:
        tensor = self.initializers.get(name)
        if tensor is None or not self._trainable(tensor) or self.uses.get(name, 0) != 1:
            return None
        value = numpy_helper.to_array(tensor)
        return value if value.ndim == ndim else None

    def _layer_step(self, node, layer: nn.Module, output: str, names: list[str]) -> Step:
        self.absorbed.update(names)
        self.net.layers.append(layer)
        index = len(self.net.layers) - 1
        net = self.net
        return Step(node.op_type, [node.input[0]], [output], lambda x: net.layers[index](x))

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

    # ---- every other node, through the operator table

    def _step(self, node: onnx.NodeProto) -> Step:
        """The node's Step after checking its operator, attributes and used outputs against the table."""
        rule = self.table.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if rule is None:
            raise OnnxConversionError(f"operator {node.domain + '.' if node.domain else ''}{node.op_type} is not supported ({node_description(node)})")
        unknown = sorted(a.name for a in node.attribute if a.name not in rule.attributes)
        if unknown:
            raise OnnxConversionError(f"{node.op_type} attribute {', '.join(unknown)} is not supported ({node_description(node)})")
        used = [i for i, name in enumerate(node.output) if name and (self.uses.get(name) or name == self.net.output_name)]
        if any(i >= rule.outputs for i in used):
            raise OnnxConversionError(f"{node.op_type}: only its first {rule.outputs} output(s) may be used ({node_description(node)})")
        attributes = decoded_attributes(node)
        view = Node(node, attributes, self.net.opset, self.dtype, self.net.constant_value)
        try:
            run = rule.build(view)
        except OnnxConversionError as error:
            raise OnnxConversionError(f"{node.op_type}: {error} ({node_description(node)})") from None
        return Step(node.op_type, list(node.input), list(node.output), run)

    def _fold(self, step: Step) -> bool:
        """Compute a node whose inputs are all constants now, once; its outputs become constants. False if it is not one."""
        if any(name and self.net.constant_value(name) is None for name in step.inputs):
            return False
        with torch.no_grad():
            args = [self.net.tensor(name) if name else None for name in step.inputs]
            result = step.run(*args)
        for name, value in zip(step.outputs, result if isinstance(result, tuple) else (result,)):
            if name:
                self.net.add_constant(name, value.detach().cpu().numpy(), self.device)
        return True

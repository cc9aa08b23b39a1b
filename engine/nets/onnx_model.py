"""An uploaded ONNX model as a torch module, converted node by node through the operator table (onnx_ops/).

    net = build_onnx_network(model_spec, onnx_bytes, dtype=torch.float64)
    net(x) = f(w; x) ∈ R^O    (logits, [n, O])      net.outputs(x) = φ(f)    (the spec's head)

The graph is parsed (onnx protobuf, nothing run by onnx) and each node becomes one step of
`OnnxNetwork.forward`, in the graph's topological order. Weights (the values exported,
multiplier 1, until the spec's parameterization rescales the layers' weights by their fan-in:
onnx_parameterization.py) that exactly one node input reads ("owned": a tied
initializer, read twice, is never absorbed) become layers when the layer's input is computed
from the network's input (not a constant):

    Gemm(A, B, C), transA = 0, B a 2-D initializer,
        C a 1-D initializer [out] or none                      → ScaledLinear, W = B (transB) or Bᵀ, b = C,
                                                                 c = alpha, β = beta; when A = Reshape(x, shape)
        read by this Gemm only flattens x [n, …, in] to [n·…, in] (GPT-2's Conv1D: view, addmm), the layer runs on
        x itself and its output is flattened (another Reshape: the layer runs on A)
    MatMul(x, Transpose(W, perm=[1, 0])), W 2-D, the Transpose
        read by this MatMul only (torch's nn.Linear on [n, …, in]) → ScaledLinear, W as stored [out, in]
    MatMul(x, B), B a 2-D initializer                          → ScaledLinear, W = Bᵀ
        either MatMul, then Add(·, b) or Add(b, ·) of a 1-D initializer [out], the MatMul's output read by
        that Add only                                          → the same ScaledLinear with bias b (else bias-free,
                                                                 the Add an ordinary node)
    Conv(x, W, B), W [C', C/group, kh, kw] or [C', C/group, k] an initializer, B a 1-D initializer or none,
        any group (depthwise too), dilations, strides, kernel shape, explicit pads (asymmetric ones applied
        with F.pad in the layer) or auto_pad VALID / SAME_UPPER / SAME_LOWER (pads from the input's size)
                                                               → ScaledConv2d / ScaledConv1d (a height-1 conv2d)
    Gather(E, ids), axis 0, E a 2-D initializer, ids not a constant
                                                               → ScaledEmbedding, negative ids from the end
    every other floating-point initializer with ≥ 1 dimension → a parameter in `weights`

so the structured tangent kernel (ntklab.engine.kernels.ntk) covers those layers' weights and biases
wherever each call is batched over the points (ntklab.engine.kernels.layer_capture checks it on the
probe points). Fallback parameters (per-sample gradients) are the rest: LayerNorm / BatchNorm /
GroupNorm γ, β, recurrent weights, class tokens, layer scales, tied weights, 3-D convolutions,
and layers whose calls are not batched — a position table read at ids [1, T] shared by all
points, nn.MultiheadAttention's projections (run on [T, n, d] or [T·n, d]), Swin's windowed
attention ([n·windows, …]).
A layer's parameters are `layers.<i>.weight` / `layers.<i>.bias` (i in the order of the graph's
nodes), the others `weights.<initializer name, non-word characters as _>`;
`net.parameter_sources[name] = (initializer, transposed)` names the initializer each trainable
parameter holds and whether it holds its transpose (MatMul by B, Gemm without transB); under
ntk or mup a layer's weight holds the initializer divided by the layer's multiplier m.
`net.initializer_views()` are the parameters under those names and in those shapes (saved
weights use them: engine/artifacts.py).
Running statistics of a batch norm
(ntklab.api_schemas.uploads.trainable_initializers), scalar and integer initializers and Constant
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

from ntklab.api_schemas.spec import OnnxModel
from ntklab.api_schemas.uploads import constant_names, node_description, trainable_initializers
from ntklab.engine.callbacks import Checkpoint, no_checkpoint
from ntklab.engine.nets.base import TangentNetwork
from ntklab.engine.nets.layers import ScaledConv1d, ScaledConv2d, ScaledEmbedding, ScaledLinear
from ntklab.engine.nets.onnx_ops.activations import ACTIVATIONS
from ntklab.engine.nets.onnx_ops.registry import Node, OnnxConversionError, decoded_attributes, table
from ntklab.engine.nets.onnx_parameterization import reparameterize_

LAYERS = ("Gemm", "MatMul", "Conv")

__all__ = ["OnnxConversionError", "OnnxNetwork", "build_onnx_network"]


@dataclass
class Step:
    """One node: `run(*inputs)` maps its input tensors (None for an omitted optional input) to its output, or a tuple of outputs;
    `layer` is the index in `layers` of the layer the node became, None for any other node."""

    op: str
    inputs: list[str]
    outputs: list[str]
    run: Callable[..., Tensor | tuple[Tensor, ...]]
    layer: int | None = None


class OnnxNetwork(TangentNetwork):
    """f(w; x) of an uploaded ONNX graph; `layers` hold the Linear/Conv weights, `weights` the other parameters."""

    def __init__(
        self,
        model: OnnxModel,
        graph: onnx.GraphProto,
        opset: int,
        dtype: torch.dtype,
        device,
        checkpoint: Checkpoint = no_checkpoint,
    ) -> None:
        super().__init__(
            head=model.output_activation,
            output_dim=model.output_dim,
            kind="onnx",
            parameterization=model.parameterization,
        )
        self.float_dtype = dtype
        self.opset = opset
        self.layers = nn.ModuleList()
        self.weights = nn.ParameterDict()
        self.constants = nn.Module()
        self._names: dict[str, tuple[str, str]] = {}
        self._keys: set[str] = set()  # the module keys taken, so naming is O(1) per tensor
        self.parameter_sources: dict[str, tuple[str, bool]] = {}
        self._values: dict[str, np.ndarray] = {}
        initializers = {t.name for t in graph.initializer}
        inputs = [value.name for value in graph.input if value.name not in initializers]
        self.input_name, self.output_name = inputs[0], graph.output[0].name
        self.steps: list[Step] = []
        _Converter(self, graph, dtype, device, checkpoint).convert()
        reparameterize_(self.layers, self.steps, self.parameterization)
        sources = {source for source, _ in self.parameter_sources.values()}
        self._source_shapes = {t.name: tuple(t.dims) for t in graph.initializer if t.name in sources}
        self.to(device=device)

    def initializer_views(self) -> dict[str, Tensor]:
        """Each parameter under the name of the initializer it holds (an export's names: torch.onnx.export names
        them as the module's state_dict does), as a view shaped as that initializer: a weight held transposed
        (MatMul by B, Gemm without transB) transposed back, a 1-D convolution's [C', C, 1, k] as [C', C, k].
        Writing into a view writes the parameter."""
        params = dict(self.named_parameters())
        return {
            source: (params[name].T if transposed else params[name]).view(self._source_shapes[source])
            for name, (source, transposed) in self.parameter_sources.items()
        }

    # ---- tensors by ONNX name

    def add_weight(self, name: str, value: np.ndarray, dtype: torch.dtype, device) -> None:
        key = _key(name, self._keys)
        self.weights[key] = nn.Parameter(torch.tensor(value, dtype=dtype, device=device))
        self._names[name] = ("weights", key)
        self.parameter_sources[f"weights.{key}"] = (name, False)

    def add_constant(self, name: str, value: np.ndarray, device) -> None:
        """A buffer holding `value` (float values in the network's dtype); a writable contiguous array (a folded node's
        result) is shared, not copied, so each constant is held once (the upload's estimate counts it once)."""
        key = _key(name, self._keys)
        shared = value.flags.writeable and value.flags.c_contiguous
        tensor = torch.as_tensor(value if shared else np.array(value, copy=True), device=device)
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

    def saved_parameters(self) -> dict[str, Tensor]:
        """The initializers' views (initializer_views): a weights artifact holds an uploaded model's weights as
        its file names and shapes them."""
        return self.initializer_views()

    # ---- the network interface of ntklab.engine.nets.base.TangentNetwork

    def forward(self, x: Tensor) -> Tensor:
        """Logits f(w; x), [n, O] (no hidden representations collected)."""
        return self._run(x, None)

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
    model: OnnxModel,
    onnx_bytes: bytes,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    checkpoint: Checkpoint = no_checkpoint,
) -> OnnxNetwork:
    """The torch module of an uploaded ONNX model, its weights cast to `dtype` and trainable; the conversion
    calls checkpoint() before each node, folded at conversion or not."""
    proto = onnx.ModelProto()
    proto.ParseFromString(onnx_bytes)
    if any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer):
        raise OnnxConversionError("external-data references are not supported")
    opset = next((entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx")), 0)
    return OnnxNetwork(model, proto.graph, int(opset), dtype, device, checkpoint)


def _key(name: str, taken: set[str]) -> str:
    """A module key for ONNX tensor `name` (non-word characters as _, unique among `taken`), added to `taken`."""
    key = re.sub(r"\W", "_", name) or "t"
    key = key if not key[0].isdigit() else f"t_{key}"
    candidate, suffix = key, 1
    while candidate in taken:
        candidate, suffix = f"{key}_{suffix}", suffix + 1
    taken.add(candidate)
    return candidate


class _Converter:
    def __init__(
        self, net: OnnxNetwork, graph: onnx.GraphProto, dtype: torch.dtype, device, checkpoint: Checkpoint
    ) -> None:
        self.net, self.graph, self.dtype, self.device = net, graph, dtype, device
        self.checkpoint = checkpoint
        self.table = table()
        self.initializers = {t.name: t for t in graph.initializer}
        self.uses: dict[str, int] = {}  # node inputs and graph outputs that read each value
        self.consumers: dict[str, list[int]] = {}
        for index, node in enumerate(graph.node):
            for name in node.input:
                self.uses[name] = self.uses.get(name, 0) + 1
                self.consumers.setdefault(name, []).append(index)
        for value in graph.output:
            self.uses[value.name] = self.uses.get(value.name, 0) + 1
        self.trainable = {name for name, _ in trainable_initializers(graph)}
        self.constants, _ = constant_names(graph)  # the values known at conversion: the API costs folding by this rule
        self.absorbed: set[str] = set()
        self.skip: set[int] = set()  # nodes a layer took in (the Add of a bias)
        self.transposes: dict[str, str] = {}  # output of a Transpose(W) that one MatMul reads as its weight → W
        self.flattens: dict[str, onnx.NodeProto] = {}  # output of a Reshape that one Gemm reads as A → the Reshape
        self.deferred: dict[
            str, int
        ] = {}  # those Transpose / Reshape nodes by output: run with their reader, or before it

    def _trainable(self, tensor: TensorProto) -> bool:
        return tensor.name in self.trainable

    def convert(self) -> None:
        for name, tensor in self.initializers.items():
            if not self._trainable(tensor):
                self.net.add_constant(name, numpy_helper.to_array(tensor), self.device)
        nodes = list(self.graph.node)
        self._plan_deferred(nodes)
        held = set(self.deferred.values())
        for index, node in enumerate(nodes):
            self.checkpoint()
            if index in self.skip or index in held:
                continue
            layer = self._layer(node, nodes, index)
            if layer is not None:
                self.net.steps.append(layer)
                continue
            for name in node.input:  # a Transpose / Reshape held back for a layer that did not form runs after all
                if name in self.deferred:
                    self._emit(nodes[self.deferred.pop(name)])
            self._emit(node)
        for name, tensor in self.initializers.items():
            if name not in self.absorbed and self._trainable(tensor):
                self.net.add_weight(name, numpy_helper.to_array(tensor), self.dtype, self.device)

    def _emit(self, node: onnx.NodeProto) -> None:
        step = self._step(node)
        if not self._fold(step):
            self.net.steps.append(step)

    def _layer(self, node: onnx.NodeProto, nodes: list[onnx.NodeProto], index: int) -> Step | None:
        """A Gemm, MatMul, Conv or Gather by an initializer it alone reads, as a layer the structured kernel covers; else None."""
        if node.op_type not in ("Gemm", "MatMul", "Conv", "Gather") or not self._plain(node):
            return None
        data = (
            self.flattens[node.input[0]].input[0]
            if node.input and node.input[0] in self.flattens
            else (node.input[0] if node.input else "")
        )
        if not data or self.net.constant_value(data) is not None:
            return None  # a layer's input must depend on the points (a constant one is never batched)
        attributes = decoded_attributes(node)
        if node.op_type == "Gemm":
            return self._gemm_layer(node, attributes)
        if node.op_type == "MatMul":
            return self._matmul_layer(node, nodes, index)
        if node.op_type == "Conv":
            return self._conv_layer(node, attributes)
        return self._embedding_layer(node, attributes)

    def _plain(self, node: onnx.NodeProto) -> bool:
        """A node of the default domain with only attributes the table knows (else _step refuses it by name)."""
        rule = self.table.get(node.op_type)
        return (
            node.domain in ("", "ai.onnx")
            and rule is not None
            and all(attribute.name in rule.attributes for attribute in node.attribute)
        )

    # ---- Linear, Conv and Embedding layers owned by ScaledLinear / ScaledConv2d / ScaledConv1d / ScaledEmbedding

    def _owned(self, name: str, ndim: int) -> np.ndarray | None:
        """The value of a trainable initializer of `ndim` dimensions that exactly one node input reads (so not tied), else None."""
        tensor = self.initializers.get(name)
        if tensor is None or not self._trainable(tensor) or self.uses.get(name, 0) != 1:
            return None
        value = numpy_helper.to_array(tensor)
        return value if value.ndim == ndim else None

    def _layer_step(
        self,
        op: str,
        layer: nn.Module,
        data: str | list[str],
        output: str,
        names: list[str],
        *,
        transposed: bool = False,
        run: Callable[..., Tensor] | None = None,
    ) -> Step:
        """Register `layer` as layers.<i>, its weight (and bias) holding the initializers `names`; the step maps data → output
        by layer(x), or by run(layer, *data)."""
        self.absorbed.update(names)
        self.net.layers.append(layer)
        index = len(self.net.layers) - 1
        self.net.parameter_sources[f"layers.{index}.weight"] = (names[0], transposed)
        if len(names) > 1:
            self.net.parameter_sources[f"layers.{index}.bias"] = (names[1], False)
        net, inputs = self.net, [data] if isinstance(data, str) else data
        if run is None:
            return Step(op, inputs, [output], lambda x: net.layers[index](x), layer=index)
        return Step(op, inputs, [output], lambda *args: run(net.layers[index], *args), layer=index)

    def _copy(self, layer: nn.Module, weight: np.ndarray, bias: np.ndarray | None) -> nn.Module:
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(weight))
            if bias is not None:
                layer.bias.copy_(torch.tensor(bias))
        return layer

    def _linear(
        self, weight: np.ndarray, bias: np.ndarray | None, alpha: float = 1.0, beta: float = 1.0
    ) -> ScaledLinear:
        layer = ScaledLinear(
            weight.shape[1],
            weight.shape[0],
            bias=bias is not None,
            weight_multiplier=alpha,
            bias_multiplier=beta,
            dtype=self.dtype,
            device=self.device,
        )
        return self._copy(layer, weight, bias)

    def _gemm_layer(self, node, attributes: dict) -> Step | None:
        """Gemm(A, B, C) = α·A·B' + β·C, transA = 0, B an initializer, C one of [out] or none → ScaledLinear(c = α, β)."""
        if attributes.get("transA", 0) or len(node.input) < 2:
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
        linear = self._linear(weight, bias, float(attributes.get("alpha", 1.0)), float(attributes.get("beta", 1.0)))
        transposed = not attributes.get("transB", 0)
        if node.input[0] not in self.flattens:
            return self._layer_step("Gemm", linear, node.input[0], node.output[0], names, transposed=transposed)
        reshape = self.flattens[node.input[0]]
        flatten = self._step(reshape).run

        def run(layer: nn.Module, x: Tensor, shape: Tensor) -> Tensor:
            """Gemm(Reshape(x, shape)) with the layer on x [n, …, in] itself when the Reshape flattens x's leading axes
            (A = x.reshape(-1, in), row for row), so the layer's calls stay batched over the points; else on A."""
            a = flatten(x, shape)
            if x.dim() > 2 and a.dim() == 2 and a.shape[1] == x.shape[-1] and a.shape[0] == x[..., 0].numel():
                z = layer(x)
                return z.reshape(a.shape[0], z.shape[-1])
            return layer(a)

        return self._layer_step(
            "Gemm", linear, list(reshape.input[:2]), node.output[0], names, transposed=transposed, run=run
        )

    def _plan_deferred(self, nodes: list[onnx.NodeProto]) -> None:
        """Nodes a layer may take in, read by that layer's node alone:
        Transpose(W, perm=[1, 0]) of a 2-D initializer W it alone reads, read by one MatMul as its weight (torch's nn.Linear
        on [n, …, in]: W [out, in] is the Linear's weight as it stands), and Reshape(x, shape) read by one Gemm as A
        (GPT-2's Conv1D: x [n, T, in] flattened to [n·T, in] for an addmm)."""
        for index, node in enumerate(nodes):
            if node.op_type not in ("Transpose", "Reshape") or not self._plain(node) or not node.output:
                continue
            output = node.output[0]
            readers = self.consumers.get(output, [])
            if self.uses.get(output, 0) != 1 or len(readers) != 1 or len(node.output) != 1:
                continue
            reader = nodes[readers[0]]
            if node.op_type == "Transpose":
                perm = decoded_attributes(node).get("perm")
                if (
                    len(node.input) == 1
                    and (perm is None or list(perm) == [1, 0])
                    and self._owned(node.input[0], 2) is not None
                    and reader.op_type == "MatMul"
                    and list(reader.input[1:]) == [output]
                    and reader.input[0] != output
                ):
                    self.transposes[output] = node.input[0]
                    self.deferred[output] = index
            elif (
                len(node.input) == 2
                and all(node.input)
                and reader.op_type == "Gemm"
                and len(reader.input) >= 2
                and reader.input[0] == output
                and output not in reader.input[1:]
            ):
                self.flattens[output] = node
                self.deferred[output] = index

    def _matmul_layer(self, node, nodes, index: int) -> Step | None:
        """MatMul(x, B) with B = Transpose(W) or a 2-D initializer, then optionally Add(·, b) of a 1-D initializer [out]
        (either order) that only this MatMul's output feeds → ScaledLinear (W, or Bᵀ; b)."""
        if len(node.input) != 2:
            return None
        if node.input[1] in self.transposes:
            names = [self.transposes[node.input[1]]]
            weight, transposed = self._owned(names[0], 2), False
        else:
            names = [node.input[1]]
            owned = self._owned(names[0], 2)
            if owned is None:
                return None
            weight, transposed = owned.T, True
        output, bias = node.output[0], None
        readers = self.consumers.get(output, [])
        if self.uses.get(output, 0) == 1 and len(readers) == 1:
            add = nodes[readers[0]]
            if add.op_type == "Add" and self._plain(add) and len(add.input) == 2 and add.input[0] != add.input[1]:
                other = add.input[1] if add.input[0] == output else add.input[0]
                bias = self._owned(other, 1)
                if bias is not None and bias.shape[0] == weight.shape[0]:
                    names.append(other)
                    self.skip.add(readers[0])
                    output = add.output[0]
                else:
                    bias = None
        return self._layer_step(
            "MatMul", self._linear(weight, bias), node.input[0], output, names, transposed=transposed
        )

    def _conv_layer(self, node, attributes: dict) -> Step | None:
        """Conv (1-D or 2-D; any group, dilation, stride, kernel; explicit pads or auto_pad) by an initializer weight,
        optional 1-D initializer bias → ScaledConv1d / ScaledConv2d."""
        weight = self._owned(node.input[1], 3) if len(node.input) > 1 else None
        weight = weight if weight is not None else (self._owned(node.input[1], 4) if len(node.input) > 1 else None)
        if weight is None:
            return None
        rank, group = weight.ndim - 2, int(attributes.get("group", 1))
        kernel = list(weight.shape[2:])
        dilations, strides = attributes.get("dilations", [1] * rank), attributes.get("strides", [1] * rank)
        pads = attributes.get("pads", [0] * 2 * rank)
        auto_pad = attributes.get("auto_pad", "NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if (
            len(dilations) != rank
            or len(strides) != rank
            or len(pads) != 2 * rank
            or list(attributes.get("kernel_shape", kernel)) != kernel
            or group < 1
            or weight.shape[0] % group
            or auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
            or min(kernel) < 1
        ):
            return None  # the table's Conv runs it, or refuses it by name
        bias = None
        if len(node.input) > 2 and node.input[2]:
            bias = self._owned(node.input[2], 1)
            if bias is None or bias.shape[0] != weight.shape[0]:
                return None
        padding = auto_pad.lower() if auto_pad.startswith("SAME") else [0] * 2 * rank if auto_pad == "VALID" else pads
        common = dict(bias=bias is not None, weight_multiplier=1.0, groups=group, dtype=self.dtype, device=self.device)
        in_channels, out_channels = weight.shape[1] * group, weight.shape[0]
        if rank == 1:
            layer = ScaledConv1d(
                in_channels,
                out_channels,
                kernel[0],
                stride=int(strides[0]),
                dilation=int(dilations[0]),
                padding=padding if isinstance(padding, str) else (int(padding[0]), int(padding[1])),
                **common,
            )
        else:
            layer = ScaledConv2d(
                in_channels,
                out_channels,
                (kernel[0], kernel[1]),
                stride=(int(strides[0]), int(strides[1])),
                dilation=(int(dilations[0]), int(dilations[1])),
                padding=padding if isinstance(padding, str) else tuple(int(p) for p in padding),
                **common,
            )
        names = [node.input[1]] + ([node.input[2]] if bias is not None else [])
        return self._layer_step("Conv", self._copy(layer, weight, bias), node.input[0], node.output[0], names)

    def _embedding_layer(self, node, attributes: dict) -> Step | None:
        """Gather(E, ids) on axis 0 of a 2-D initializer E, ids computed from the input → ScaledEmbedding (E)."""
        if len(node.input) != 2 or attributes.get("axis", 0) not in (0, -2):
            return None
        table = self._owned(node.input[0], 2)
        if table is None or not node.input[1] or self.net.constant_value(node.input[1]) is not None:
            return None  # constant ids (position ids [1, T]) are never batched: the table stays a fallback parameter
        vocab = table.shape[0]
        layer = ScaledEmbedding(vocab, table.shape[1], weight_multiplier=1.0, dtype=self.dtype, device=self.device)

        def lookup(embedding: nn.Module, ids: Tensor) -> Tensor:
            if ids.is_floating_point():
                raise OnnxConversionError(f"Gather: indices of type {ids.dtype} ({node_description(node)})")
            return embedding(torch.where(ids < 0, ids + vocab, ids))  # negative ids count from the end, as ONNX says

        return self._layer_step(
            "Gather", self._copy(layer, table, None), node.input[1], node.output[0], [node.input[0]], run=lookup
        )

    # ---- every other node, through the operator table

    def _step(self, node: onnx.NodeProto) -> Step:
        """The node's Step after checking its operator, attributes and used outputs against the table."""
        rule = self.table.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if rule is None:
            raise OnnxConversionError(
                f"operator {node.domain + '.' if node.domain else ''}{node.op_type} is not supported ({node_description(node)})"
            )
        unknown = sorted(a.name for a in node.attribute if a.name not in rule.attributes)
        if unknown:
            raise OnnxConversionError(
                f"{node.op_type} attribute {', '.join(unknown)} is not supported ({node_description(node)})"
            )
        used = [
            i for i, name in enumerate(node.output) if name and (self.uses.get(name) or name == self.net.output_name)
        ]
        if any(i >= rule.outputs for i in used):
            raise OnnxConversionError(
                f"{node.op_type}: only its first {rule.outputs} output(s) may be used ({node_description(node)})"
            )
        attributes = decoded_attributes(node)
        view = Node(node, attributes, self.net.opset, self.dtype, self.net.constant_value)
        try:
            run = rule.build(view)
        except OnnxConversionError as error:
            raise OnnxConversionError(f"{node.op_type}: {error} ({node_description(node)})") from None
        return Step(node.op_type, list(node.input), list(node.output), run)

    def _fold(self, step: Step) -> bool:
        """Compute a node whose inputs are all constants now, once; its outputs become constants. False if it is not one.

        Constants as ntklab.api_schemas.uploads.constant_names defines them (the rule the API's upload check costs and bounds
        folding by: service/onnx_upload.py)."""
        if any(name and name not in self.constants for name in step.inputs):
            return False
        with torch.no_grad():
            args = [self.net.tensor(name) if name else None for name in step.inputs]
            result = step.run(*args)
        for name, value in zip(step.outputs, result if isinstance(result, tuple) else (result,)):
            if name:
                self.net.add_constant(name, value.detach().cpu().numpy(), self.device)
        return True

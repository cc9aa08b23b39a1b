"""The shapes of the network a ModelSpec describes, by arithmetic only (no torch, nothing allocated).

The service checks its caps with this module and the engine builds its layers from it, so the
parameter count the API refuses a spec on is the count of the network a worker would build.

Every network is a stack of affine hidden layers and a linear readout; `plan_network` gives
each layer's input size, output size and, for a convolution, kernel k, stride s and padding p:

    mlp      in_1 = d = ∏ input_shape,  in_{l+1} = out_l = hidden[l],  readout hidden[-1] → O
    cnn      image (C, H, W) from model.input_shape or the inputs; layer l maps C_l → hidden[l]
             channels and H → ⌊(H + 2p − k)/s⌋ + 1 (likewise W), at least 1×1 after every layer;
             the readout sees C_L features (global_avg) or C_L·H_L·W_L (flatten)
    resnet   one width m = hidden[0] (every entry equal): a first layer d → m (fc) or C → m
             (conv, odd k), then `blocks` residual layers m → m (conv: stride 1, padding k // 2,
             so the spatial size is kept), then the readout as for mlp / cnn

The fan-in of a layer is in_l for a fully connected layer and C_in·k² for a convolution, and
the trainable parameter count is

    p = Σ_l out_l·fan_in_l + out_l·[bias]

over the hidden layers, plus the readout's term when model.train_output_layer is true.
A graph (kind "graph") is planned layer by layer by api_schemas/graph_plan.py; its count is
the layers' parameters plus the readout F → O on the graph's final vector [F], counted as above.
Its input is model.input_shape when given, else the flat vector of the data's features.

An architecture that cannot be built raises ValueError whose message starts with the dotted
field at fault ("model.kernel_size ...", "model.layers.3 ...").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ntklab.api_schemas.graph_plan import GraphPlan, conv_output_size, plan_graph
from ntklab.api_schemas.spec import ModelSpec


@dataclass(frozen=True)
class LayerPlan:
    """One affine layer: a convolution when kernel_size > 0, else fully connected."""

    in_size: int
    out_size: int
    activation: str | None
    kernel_size: int = 0
    stride: int = 1
    padding: int = 0
    residual: bool = False

    @property
    def fan_in(self) -> int:
        """in_size for a fully connected layer, in_channels·k² for a convolution."""
        return self.in_size * max(self.kernel_size, 1) ** 2

    def parameters(self, bias: bool) -> int:
        """out·fan_in weights, plus out biases when `bias`."""
        return self.out_size * self.fan_in + (self.out_size if bias else 0)


@dataclass(frozen=True)
class NetworkPlan:
    hidden: tuple[LayerPlan, ...]
    readout: LayerPlan
    image_shape: tuple[int, int, int] | None
    pool: str | None


def plan_network(model: ModelSpec, input_shape: tuple[int, ...]) -> NetworkPlan:
    """The layers an mlp, cnn or resnet spec describes, by arithmetic only; raises ValueError naming the field at fault."""
    if model.output_dim is None:
        raise ValueError("model.output_dim is required to build a network (fill it from the data)")
    if model.kind == "mlp":
        return _plan_mlp(model, input_shape)
    if model.kind == "cnn":
        return _plan_cnn(model, _image_shape(model, input_shape))
    if model.kind == "resnet":
        return _plan_resnet(model, input_shape)
    raise ValueError(f"model.kind {model.kind!r} is not a built-in family (a graph is planned by plan_model_graph)")


def graph_input_shape(model: ModelSpec, input_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape a graph reads one input as: model.input_shape when given, else the flat (∏ input_shape,)."""
    return tuple(model.input_shape) if model.input_shape is not None else (math.prod(input_shape),)


def plan_model_graph(model: ModelSpec, input_shape: tuple[int, ...]) -> GraphPlan:
    """The shapes of a graph spec's layers for inputs of `input_shape` (the data's, flat or not)."""
    return plan_graph(model.layers, graph_input_shape(model, input_shape), bias=model.bias)


def count_parameters(model: ModelSpec, input_shape: tuple[int, ...]) -> int:
    """Trainable parameters of the network the spec describes: Σ_l out_l·fan_in_l + out_l·[bias]."""
    if model.kind == "graph":
        graph = plan_model_graph(model, input_shape)
        readout = LayerPlan(graph.features, model.output_dim, None).parameters(model.bias)
        return graph.parameters + (readout if model.train_output_layer else 0)
    plan = plan_network(model, input_shape)
    hidden = sum(layer.parameters(model.bias) for layer in plan.hidden)
    return hidden + (plan.readout.parameters(model.bias) if model.train_output_layer else 0)


def _plan_mlp(model: ModelSpec, input_shape: tuple[int, ...]) -> NetworkPlan:
    sizes = [math.prod(input_shape), *model.hidden]
    hidden = tuple(LayerPlan(sizes[l], sizes[l + 1], act) for l, act in enumerate(model.activations()))
    return NetworkPlan(hidden, LayerPlan(sizes[-1], model.output_dim, None), None, None)


def _plan_cnn(model: ModelSpec, image: tuple[int, int, int]) -> NetworkPlan:
    channels, height, width = image
    hidden = []
    for out_channels, act in zip(model.hidden, model.activations()):
        hidden.append(LayerPlan(channels, out_channels, act, model.kernel_size, model.stride, model.padding))
        channels = out_channels
        height, width = _conv_size(model, height, width, len(hidden))
    return NetworkPlan(tuple(hidden), _readout(model, channels, height, width), image, model.readout)


def _plan_resnet(model: ModelSpec, input_shape: tuple[int, ...]) -> NetworkPlan:
    width = model.hidden[0]
    if any(h != width for h in model.hidden):
        raise ValueError(f"model.hidden must hold one width for a resnet, got {model.hidden}")
    acts = model.activations()
    block_acts = [acts[min(b + 1, len(acts) - 1)] for b in range(model.blocks)]
    if model.block == "fc":
        first = LayerPlan(math.prod(input_shape), width, acts[0])
        blocks = [LayerPlan(width, width, act, residual=True) for act in block_acts]
        return NetworkPlan((first, *blocks), LayerPlan(width, model.output_dim, None), None, None)
    if model.kernel_size % 2 == 0:
        raise ValueError(f"model.kernel_size must be odd for a conv resnet ('same' padding), got {model.kernel_size}")
    image = _image_shape(model, input_shape)
    first = LayerPlan(image[0], width, acts[0], model.kernel_size, model.stride, model.padding)
    height, width_px = _conv_size(model, image[1], image[2], 1)
    k = model.kernel_size
    blocks = [LayerPlan(width, width, act, k, 1, k // 2, residual=True) for act in block_acts]
    return NetworkPlan((first, *blocks), _readout(model, width, height, width_px), image, model.readout)


def _readout(model: ModelSpec, channels: int, height: int, width: int) -> LayerPlan:
    features = channels if model.readout == "global_avg" else channels * height * width
    return LayerPlan(features, model.output_dim, None)


def _conv_size(model: ModelSpec, height: int, width: int, layer: int) -> tuple[int, int]:
    out_h = conv_output_size(height, model.kernel_size, model.stride, model.padding)
    out_w = conv_output_size(width, model.kernel_size, model.stride, model.padding)
    if out_h < 1 or out_w < 1:
        raise ValueError(
            f"model.kernel_size {model.kernel_size} (stride {model.stride}, padding {model.padding}) maps the "
            f"{height}×{width} input of conv layer {layer} to {out_h}×{out_w}; each layer needs at least 1×1"
        )
    return out_h, out_w


def _image_shape(model: ModelSpec, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if model.input_shape is not None:
        shape = tuple(model.input_shape)
    elif len(input_shape) == 3:
        shape = tuple(input_shape)
    else:
        raise ValueError("model.input_shape (C, H, W) is required for a convolutional model on flat inputs")
    if math.prod(shape) != math.prod(input_shape):
        raise ValueError(f"model.input_shape {list(shape)} does not hold inputs of shape {list(input_shape)}")
    return shape  # type: ignore[return-value]

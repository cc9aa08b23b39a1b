"""The built-in kinds are shorthand for layer graphs: the same network, layer for layer, weight for weight.

    mlp     (dense m_l, activation σ_l) for each hidden layer
    cnn     (conv2d C_l, activation σ_l) for each layer, then global_avg_pool or flatten
    resnet  dense | conv2d, activation σ_1, then per block
            residual([dense | conv2d (stride 1, padding k // 2), activation σ], scale = 1/blocks),
            then global_avg_pool or flatten for conv blocks

followed by the same readout and head (the graph keeps every other field of the spec). A fully
connected net reads the flat features (input_shape None, as a graph without one), a convolutional
one the image (C, H, W). Built with the same seed, the graph draws the same weights in the same
order (engine/nets/graph.py), so it computes the same function and has the same tangent kernel.

The shorthand's arithmetic (`plan_network`, no torch): each hidden layer's input size, output size
and, for a convolution, kernel k, stride s and padding p:

    mlp      in_1 = d = ∏ input_shape,  in_{l+1} = out_l = hidden[l],  readout hidden[-1] → O
    cnn      image (C, H, W) from model.input_shape or the inputs; layer l maps C_l → hidden[l]
             channels and H → ⌊(H + 2p − k)/s⌋ + 1 (likewise W), at least 1×1 after every layer;
             the readout sees C_L features (global_avg) or C_L·H_L·W_L (flatten)
    resnet   one width m = hidden[0] (every entry equal): a first layer d → m (fc) or C → m
             (conv, odd k), then `blocks` residual layers m → m (conv: stride 1, padding k // 2,
             so the spatial size is kept), then the readout as for mlp / cnn

`as_graph` is where a spec is lowered: the planner, the cost model, the infinite-width maps and the
engine all read the graph it returns, so a built-in kind has no path of its own. The arithmetic
of the shorthand (plan_network) checks it first, so an unbuildable spec is
refused naming the field written (model.kernel_size, model.hidden), not a graph layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ntklab.api_schemas.graph import (
    ActivationLayer,
    Conv2d,
    Dense,
    Flatten,
    GlobalAvgPool,
    GraphLayer,
    Residual,
)
from ntklab.api_schemas.graph_plan import conv_output_size
from ntklab.api_schemas.spec import AnyModel, GraphModel, ModelCommon

SHORTHAND_KINDS = ("mlp", "cnn", "resnet")


def as_graph(model: AnyModel, input_shape: tuple[int, ...]) -> AnyModel:
    """The layer graph a spec describes: a graph spec as it is, an mlp, cnn or resnet lowered (builtin_as_graph)."""
    return builtin_as_graph(model, input_shape) if model.kind in SHORTHAND_KINDS else model


def builtin_as_graph(model: AnyModel, input_shape: tuple[int, ...]) -> AnyModel:
    """The graph spec of an mlp, cnn or resnet spec for inputs of `input_shape` ((d,) or (C, H, W)).

    Built without validation (GraphModel.model_construct): the spec was validated as written, and its
    graph may hold more layers than a graph a user writes may (MAX_LAYERS hidden layers are 2·MAX_LAYERS
    graph layers)."""
    plan = plan_network(model, input_shape)
    blocks = sum(layer.residual for layer in plan.hidden)
    layers: list[GraphLayer] = []
    for layer in plan.hidden:
        stage = [_affine(layer), ActivationLayer(name=layer.activation)]
        layers += [Residual(layers=stage, scale=1.0 / blocks)] if layer.residual else stage
    if plan.pool is not None:
        layers.append(GlobalAvgPool() if plan.pool == "global_avg" else Flatten())
    head = model.model_dump(include=set(ModelCommon.model_fields) - {"kind"})
    shape = list(plan.image_shape) if plan.image_shape is not None else None
    return GraphModel.model_construct(**head, kind="graph", layers=layers, input_shape=shape)


def _affine(layer: LayerPlan) -> Dense | Conv2d:
    if layer.kernel_size:
        return Conv2d(width=layer.out_size, kernel_size=layer.kernel_size, stride=layer.stride, padding=layer.padding)
    return Dense(width=layer.out_size)


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


def plan_network(model: AnyModel, input_shape: tuple[int, ...]) -> NetworkPlan:
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


def _plan_mlp(model: AnyModel, input_shape: tuple[int, ...]) -> NetworkPlan:
    sizes = [math.prod(input_shape), *model.hidden]
    hidden = tuple(LayerPlan(sizes[l], sizes[l + 1], act) for l, act in enumerate(model.activations()))
    return NetworkPlan(hidden, LayerPlan(sizes[-1], model.output_dim, None), None, None)


def _plan_cnn(model: AnyModel, image: tuple[int, int, int]) -> NetworkPlan:
    channels, height, width = image
    hidden = []
    for out_channels, act in zip(model.hidden, model.activations()):
        hidden.append(LayerPlan(channels, out_channels, act, model.kernel_size, model.stride, model.padding))
        channels = out_channels
        height, width = _conv_size(model, height, width, len(hidden))
    return NetworkPlan(tuple(hidden), _readout(model, channels, height, width), image, model.readout)


def _plan_resnet(model: AnyModel, input_shape: tuple[int, ...]) -> NetworkPlan:
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


def _readout(model: AnyModel, channels: int, height: int, width: int) -> LayerPlan:
    features = channels if model.readout == "global_avg" else channels * height * width
    return LayerPlan(features, model.output_dim, None)


def _conv_size(model: AnyModel, height: int, width: int, layer: int) -> tuple[int, int]:
    out_h = conv_output_size(height, model.kernel_size, model.stride, model.padding)
    out_w = conv_output_size(width, model.kernel_size, model.stride, model.padding)
    if out_h < 1 or out_w < 1:
        raise ValueError(
            f"model.kernel_size {model.kernel_size} (stride {model.stride}, padding {model.padding}) maps the "
            f"{height}×{width} input of conv layer {layer} to {out_h}×{out_w}; each layer needs at least 1×1"
        )
    return out_h, out_w


def _image_shape(model: AnyModel, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if model.input_shape is not None:
        shape = tuple(model.input_shape)
    elif len(input_shape) == 3:
        shape = tuple(input_shape)
    else:
        raise ValueError("model.input_shape (C, H, W) is required for a convolutional model on flat inputs")
    if math.prod(shape) != math.prod(input_shape):
        raise ValueError(f"model.input_shape {list(shape)} does not hold inputs of shape {list(input_shape)}")
    return shape  # type: ignore[return-value]

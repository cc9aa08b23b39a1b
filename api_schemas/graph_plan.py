"""The shapes of a graph model by arithmetic only: the shape after every layer and its parameters.

    plan_graph(layers, input_shape, bias=model.bias) -> GraphPlan

A representation is a vector [d], a token sequence [T, d] or an image [C, H, W] (shapes of one
input, no batch axis). Each layer's rule, shape in → shape out, and its trainable parameters
(b = 1 when the layer has biases, m = its width):

    dense            [d] → [m];  [T, d] → [T, m]                   m·d + m·b
    conv2d           [C, H, W] → [m, H', W']                        m·C·k² + m·b
    avg_pool         [C, H, W] → [C, H', W']                        0
    max_pool         [C, H, W] → [C, H', W']                        0
    global_avg_pool  [C, H, W] → [C];  [T, d] → [d]                 0
    flatten          s → [∏ s]                                      0
    activation       s → s                                          0
    layer_norm       s → s                                          2·features when affine
    embedding        [T] → [T, m]  (model.layers.0 only)            vocab·m + T·m·[positions]
    patch_embed      [C, H, W] → [⌊H/p⌋·⌊W/p⌋, m]                    m·C·p² + m·b + T·m·[positions]
    self_attention   [T, d] → [T, d]                                4·m·d + 3·m·b + d·b
    residual         s → s' of its branch                           branch + the projection's
                     d·d' (vectors, tokens) or C·C' (images: a 1×1 conv of stride σ, the
                     smallest with ⌊(H − 1)/σ⌋ + 1 = H' and likewise W); none when s' = s

where H' = ⌊(H + 2·padding − k)/stride⌋ + 1 for convolutions and pools (conv_output_size),
at least 1. The graph must end in a vector [F], which the model's readout maps to the logits.
A shape that does not fit raises GraphShapeError, a ValueError whose message starts with the
layer's dotted path ("model.layers.2.layers.1") and names the layer type and the shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ntklab.api_schemas.graph import (
    WEIGHT_LAYERS,
    ActivationLayer,
    AvgPool,
    Conv2d,
    Dense,
    Embedding,
    Flatten,
    GlobalAvgPool,
    GraphLayer,
    LayerNorm,
    MaxPool,
    PatchEmbed,
    Pool,
    Residual,
    SelfAttention,
    walk,
)

Shape = tuple[int, ...]
ROOT = "model.layers"
RANK_NAMES = {1: "vector", 2: "token sequence", 3: "image"}
ARTICLES = {1: "a", 2: "a", 3: "an"}


class GraphShapeError(ValueError):
    """A layer that cannot read the shape it is given; the message starts with the layer's path."""


@dataclass(frozen=True)
class PlannedLayer:
    """One layer with the shapes it reads and writes and its trainable parameters (a residual's include its branch).

    projection_stride: for a residual whose branch changes the shape, the stride of the skip's
    projection (1 for vectors and tokens); None when the skip is the identity.
    """

    path: str
    layer: GraphLayer
    in_shape: Shape
    out_shape: Shape
    parameters: int
    branch: tuple[PlannedLayer, ...] = ()
    projection_stride: int | None = None


@dataclass(frozen=True)
class GraphPlan:
    input_shape: Shape
    layers: tuple[PlannedLayer, ...]

    @property
    def features(self) -> int:
        """F, the width of the vector the readout reads."""
        return self.layers[-1].out_shape[0]

    @property
    def parameters(self) -> int:
        """Trainable parameters of the layers (the readout not included)."""
        return sum(layer.parameters for layer in self.layers)


def conv_output_size(size: int, kernel_size: int, stride: int, padding: int) -> int:
    """⌊(size + 2·padding − k) / stride⌋ + 1 (may be ≤ 0 for a kernel larger than the padded input)."""
    return (size + 2 * padding - kernel_size) // stride + 1


def layer_bias(layer: GraphLayer, default: bool) -> bool:
    """The layer's own `bias` when given, else the model's."""
    own = getattr(layer, "bias", None)
    return default if own is None else own


def plan_graph(layers: list[GraphLayer], input_shape: Shape, *, bias: bool) -> GraphPlan:
    """Every layer's shapes and parameters from one input of `input_shape`; raises GraphShapeError."""
    if not 1 <= len(input_shape) <= 3:
        raise GraphShapeError(f"model.input_shape {list(input_shape)} must be [d], [T, d] or [C, H, W]")
    for path, layer in walk(layers):
        if isinstance(layer, Embedding) and path != f"{ROOT}.0":
            raise GraphShapeError(f"{path} (embedding) reads integer token ids from the input, so it must be {ROOT}.0")
    if not any(isinstance(layer, WEIGHT_LAYERS) for _, layer in walk(layers)):
        raise GraphShapeError(f"{ROOT} has no weight layer, so the model would be its readout alone; add a dense layer")
    planned = _plan_sequence(layers, tuple(input_shape), bias, ROOT)
    final = planned[-1].out_shape
    if len(final) != 1:
        raise GraphShapeError(
            f"{ROOT} ends in the {_describe(final)}; the readout reads a vector: end with global_avg_pool or flatten"
        )
    return GraphPlan(tuple(input_shape), planned)


def _plan_sequence(layers: list[GraphLayer], shape: Shape, bias: bool, path: str) -> tuple[PlannedLayer, ...]:
    planned = []
    for index, layer in enumerate(layers):
        here = f"{path}.{index}"
        if isinstance(layer, Residual):
            planned.append(_plan_residual(layer, shape, bias, here))
        else:
            out_shape, parameters = RULES[type(layer)](layer, shape, layer_bias(layer, bias), here)
            planned.append(PlannedLayer(here, layer, shape, out_shape, parameters))
        shape = planned[-1].out_shape
    return tuple(planned)


def _describe(shape: Shape) -> str:
    return f"{RANK_NAMES[len(shape)]} {list(shape)}"


def _require(path: str, layer: GraphLayer, shape: Shape, ranks: tuple[int, ...], hint: str) -> None:
    if len(shape) not in ranks:
        wanted = " or ".join(f"{ARTICLES[rank]} {RANK_NAMES[rank]}" for rank in ranks)
        raise GraphShapeError(f"{path} ({layer.type}) needs {wanted}, got the {_describe(shape)}; {hint}")


def _window(path: str, layer, shape: Shape, kernel: int, stride: int, padding: int) -> tuple[int, int]:
    _, height, width = shape
    out = conv_output_size(height, kernel, stride, padding), conv_output_size(width, kernel, stride, padding)
    if min(out) < 1:
        raise GraphShapeError(
            f"{path} ({layer.type}) with kernel_size {kernel}, stride {stride}, padding {padding} maps the "
            f"{_describe(shape)} to {out[0]}×{out[1]}; it needs at least 1×1"
        )
    return out


def _dense(layer: Dense, shape: Shape, bias: bool, path: str) -> tuple[Shape, int]:
    _require(path, layer, shape, (1, 2), "put flatten or global_avg_pool before it")
    return (*shape[:-1], layer.width), layer.width * shape[-1] + layer.width * bias


def _conv2d(layer: Conv2d, shape: Shape, bias: bool, path: str) -> tuple[Shape, int]:
    _require(path, layer, shape, (3,), "set model.input_shape to [C, H, W] for image inputs")
    size = _window(path, layer, shape, layer.kernel_size, layer.stride, layer.padding)
    return (layer.width, *size), layer.width * shape[0] * layer.kernel_size**2 + layer.width * bias


def _pool(layer: Pool, shape: Shape, bias: bool, path: str) -> tuple[Shape, int]:
    _require(path, layer, shape, (3,), "pools slide over images")
    return (shape[0], *_window(path, layer, shape, layer.kernel_size, layer.step(), layer.padding)), 0


def _global_avg_pool(layer: GlobalAvgPool, shape: Shape, bias: bool, path: str) -> tuple[Shape, int]:
    _require(path, layer, shape, (2, 3), "a vector has no positions to average over")
    return (shape[-1],) if len(shape) == 2 else (shape[0],), 0


def _flatten(layer: Flatten, shape: Shape, bias: bool, path: str) -> tuple[Shape, int]:
    return (math.prod(shape),), 0


def _same_shape(layer: ActivationLayer, shape: Shape, bias: bool, path: str) -> tuple[Shape, int]:
    return shape, 0


def _layer_norm(layer: LayerNorm, shape: Shape, bias: bool, path: str) -> tuple[Shape, int]:
    features = shape[0] if len(shape) == 3 else shape[-1]
    return shape, 2 * features * layer.affine


def _embedding(layer: Embedding, shape: Shape, bias: bool, path: str) -> tuple[Shape, int]:
    _require(path, layer, shape, (1,), "its input is a vector of T token ids: model.input_shape [T]")
    tokens = shape[0]
    return (tokens, layer.width), layer.vocab * layer.width + tokens * layer.width * layer.positions


def _patch_embed(layer: PatchEmbed, shape: Shape, bias: bool, path: str) -> tuple[Shape, int]:
    _require(path, layer, shape, (3,), "set model.input_shape to [C, H, W] for image inputs")
    rows, columns = _window(path, layer, shape, layer.patch, layer.patch, 0)
    tokens = rows * columns
    weights = layer.width * shape[0] * layer.patch**2 + layer.width * bias
    return (tokens, layer.width), weights + tokens * layer.width * layer.positions


def _self_attention(layer: SelfAttention, shape: Shape, bias: bool, path: str) -> tuple[Shape, int]:
    _require(path, layer, shape, (2,), "attention mixes the tokens of a sequence: use patch_embed or embedding")
    d, m = shape[-1], layer.width
    return shape, 3 * (m * d + m * bias) + d * m + d * bias


def _plan_residual(layer: Residual, shape: Shape, bias: bool, path: str) -> PlannedLayer:
    branch = _plan_sequence(layer.layers, shape, bias, f"{path}.layers")
    out_shape = branch[-1].out_shape
    stride, projection = _projection(path, shape, out_shape)
    parameters = sum(planned.parameters for planned in branch) + projection
    return PlannedLayer(path, layer, shape, out_shape, parameters, branch, stride)


def _projection(path: str, shape: Shape, out_shape: Shape) -> tuple[int | None, int]:
    """(stride, parameters) of the skip's projection; (None, 0) when the branch keeps the shape."""
    if out_shape == shape:
        return None, 0
    mismatch = f"{path} (residual): the branch maps the {_describe(shape)} to the {_describe(out_shape)}"
    if len(out_shape) != len(shape) or (len(shape) == 2 and out_shape[0] != shape[0]):
        raise GraphShapeError(f"{mismatch}; a branch may change the features, not the kind of shape or the tokens")
    if len(shape) < 3:
        return 1, shape[-1] * out_shape[-1]
    for stride in range(1, max(shape[1:]) + 1):
        if all(conv_output_size(shape[i], 1, stride, 0) == out_shape[i] for i in (1, 2)):
            return stride, shape[0] * out_shape[0]
    raise GraphShapeError(f"{mismatch}, which no 1×1 strided projection of the skip can match")


Rule = Callable[[GraphLayer, Shape, bool, str], tuple[Shape, int]]

RULES: dict[type, Rule] = {
    Dense: _dense,
    Conv2d: _conv2d,
    AvgPool: _pool,
    MaxPool: _pool,
    GlobalAvgPool: _global_avg_pool,
    Flatten: _flatten,
    ActivationLayer: _same_shape,
    LayerNorm: _layer_norm,
    Embedding: _embedding,
    PatchEmbed: _patch_embed,
    SelfAttention: _self_attention,
}

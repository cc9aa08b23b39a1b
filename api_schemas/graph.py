"""The layers of a graph model (`model.kind = "graph"`): a JSON list composed like stax.

A graph maps one input to a representation h of one of three shapes — a vector [d], a token
sequence [T, d] or an image [C, H, W] — layer by layer; the model's linear readout (the
output head, as for every kind) then maps the final vector [F] to the O logits. The layers
and the shapes they read and write (api_schemas/graph_plan.py checks them, docs/models.md
has the full reference):

    dense            [d] → [width]; [T, d] → [T, width] (each token)    z = c·h Wᵀ + b
    conv2d           [C, H, W] → [width, H', W']                         z = c·(W ⋆ h) + b
    avg_pool         [C, H, W] → [C, H', W']
    max_pool         [C, H, W] → [C, H', W']
    global_avg_pool  [C, H, W] → [C]; [T, d] → [d]
    flatten          any → [∏ shape]
    activation       any → same, σ element-wise
    layer_norm       any → same, normalised over the features (d, or C at each pixel)
    embedding        [T] integer ids → [T, width]                        z_t = c·E[id_t] (+ c·P[t])
    patch_embed      [C, H, W] → [T, width], T = ⌊H/p⌋·⌊W/p⌋             a conv with kernel = stride = p
    self_attention   [T, d] → [T, d]                                      multi-head softmax attention
    residual         h ↦ skip(h) + scale·branch(h), skip = h or a projection where shapes differ

Every weight layer follows the model's parameterization with its fan-in (engine/nets/
parameterization.py); a layer's `bias` overrides model.bias when given.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ntklab.api_schemas.base import MAX_LAYERS, MAX_WIDTH, Activation, Strict
from ntklab.api_schemas.tagged_union import tagged_union

MAX_VOCAB = 1_000_000
MAX_HEADS = 4096
MAX_NESTING = 64
"""Residual layers nest in one another at most this deep (a residual in model.layers is at depth 1).

The one depth limit, checked before anything else validates the layers: the worker runs a
graph with one torch module call per level (8 Python frames each: a depth-64 job needs about
570 of the interpreter's 1000, the rest is left to Celery), and a job's response nests two JSON
levels per level (pydantic serialises about 125 levels of residuals, then fails).
"""

Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]
Bias = Annotated[bool | None, Field(description="default: model.bias")]


class Dense(Strict):
    """z = c · h Wᵀ + b over the last axis: [d] → [width], or each token of [T, d] → [T, width]."""

    type: Literal["dense"] = "dense"
    width: Width
    bias: Bias = None


class Conv2d(Strict):
    """z = c · conv2d(h, W) + b: [C, H, W] → [width, H', W'], H' = ⌊(H + 2·padding − k)/stride⌋ + 1."""

    type: Literal["conv2d"] = "conv2d"
    width: Width = Field(description="output channels")
    kernel_size: int = Field(default=3, ge=1, le=15)
    stride: int = Field(default=1, ge=1, le=8)
    padding: int = Field(default=1, ge=0, le=15)
    bias: Bias = None


class Pool(Strict):
    """Window pooling of an image, [C, H, W] → [C, H', W'] as for a convolution; stride defaults to kernel_size."""

    kernel_size: int = Field(default=2, ge=1, le=15)
    stride: int | None = Field(default=None, ge=1, le=15)
    padding: int = Field(default=0, ge=0, le=7)

    @model_validator(mode="after")
    def _padding_at_most_half_the_window(self):
        if 2 * self.padding > self.kernel_size:
            raise ValueError(f"padding {self.padding} exceeds half of kernel_size {self.kernel_size}")
        return self

    def step(self) -> int:
        return self.stride if self.stride is not None else self.kernel_size


class AvgPool(Pool):
    """Mean over each window; zero padding counts in the mean."""

    type: Literal["avg_pool"] = "avg_pool"


class MaxPool(Pool):
    """Maximum over each window; padding never wins."""

    type: Literal["max_pool"] = "max_pool"


class GlobalAvgPool(Strict):
    """Mean over positions: [C, H, W] → [C] (over H, W), [T, d] → [d] (over the tokens)."""

    type: Literal["global_avg_pool"] = "global_avg_pool"


class Flatten(Strict):
    """Any shape → the vector [∏ shape] (row-major, as torch.flatten)."""

    type: Literal["flatten"] = "flatten"


class ActivationLayer(Strict):
    """σ element-wise, any of the hidden activations of the built-in kinds."""

    type: Literal["activation"] = "activation"
    name: Activation


class LayerNorm(Strict):
    """(h − mean)/√(var + eps) over the features, then γ ⊙ · + β when affine (γ = 1, β = 0 at init).

    The features are the last axis of [d] and [T, d] (each token alone) and the channels of
    [C, H, W] (each pixel alone, as ConvNeXt's channel LayerNorm).
    """

    type: Literal["layer_norm"] = "layer_norm"
    affine: bool = True
    eps: float = Field(default=1e-5, gt=0, le=1.0)


class Embedding(Strict):
    """Integer token ids [T] → [T, width], z_t = c·E[id_t] (+ c·P[t] with positions); the first layer only."""

    type: Literal["embedding"] = "embedding"
    vocab: int = Field(ge=1, le=MAX_VOCAB)
    width: Width
    positions: bool = Field(default=False, description="add a learned position embedding P [T, width]")


class PatchEmbed(Strict):
    """Image [C, H, W] → tokens [T, width]: a conv with kernel = stride = patch, T = ⌊H/patch⌋·⌊W/patch⌋ row-major."""

    type: Literal["patch_embed"] = "patch_embed"
    patch: int = Field(ge=1, le=64)
    width: Width
    positions: bool = Field(default=False, description="add a learned position embedding P [T, width]")
    bias: Bias = None


class SelfAttention(Strict):
    """Multi-head softmax self-attention over tokens, [T, d] → [T, d]; width = heads · d_head (the q/k/v width)."""

    type: Literal["self_attention"] = "self_attention"
    heads: int = Field(default=1, ge=1, le=MAX_HEADS)
    width: Width
    bias: Bias = None

    @model_validator(mode="after")
    def _width_splits_into_heads(self):
        if self.width % self.heads:
            raise ValueError(f"width {self.width} does not split into {self.heads} heads of equal size")
        return self


class Residual(Strict):
    """h ↦ skip(h) + scale · branch(h); the skip is h itself, or a bias-free linear projection of h
    (a dense layer, or a 1×1 strided conv for images) where the branch changes the shape."""

    type: Literal["residual"] = "residual"
    layers: list[GraphLayer] = Field(min_length=1, max_length=MAX_LAYERS)
    scale: float = Field(
        default=1.0, gt=0, le=1e3, description="multiplier of the branch (1/blocks keeps deep stacks O(1))"
    )


GraphLayer = tagged_union(
    {
        "dense": Dense,
        "conv2d": Conv2d,
        "avg_pool": AvgPool,
        "max_pool": MaxPool,
        "global_avg_pool": GlobalAvgPool,
        "flatten": Flatten,
        "activation": ActivationLayer,
        "layer_norm": LayerNorm,
        "embedding": Embedding,
        "patch_embed": PatchEmbed,
        "self_attention": SelfAttention,
        "residual": Residual,
    },
    "type",
)

Residual.model_rebuild()

WEIGHT_LAYERS = (Dense, Conv2d, Embedding, PatchEmbed, SelfAttention)


def too_deep(layers: Any, path: str = "model.layers") -> str | None:
    """The dotted path of the first residual nested deeper than MAX_NESTING in `layers`, else None.

    Reads the layers as sent (JSON lists and objects) or as models, iteratively, so that a
    graph of any depth is refused here rather than by a recursion limit further on."""
    pending: list[tuple[Any, str, int]] = [(layers, path, 0)]
    while pending:
        items, where, depth = pending.pop()
        if not isinstance(items, list):
            continue
        for index, item in enumerate(items):
            inner = _residual_layers(item)
            if inner is None:
                continue
            here = f"{where}.{index}"
            if depth + 1 > MAX_NESTING:
                return here
            pending.append((inner, f"{here}.layers", depth + 1))
    return None


def _residual_layers(item: Any) -> Any:
    if isinstance(item, Residual):
        return item.layers
    if isinstance(item, dict) and item.get("type") == "residual":
        return item.get("layers")
    return None


def walk(layers: list[GraphLayer], path: str = "model.layers") -> Iterator[tuple[str, GraphLayer]]:
    """(dotted path, layer) for every layer, depth first, the layers of a residual after the residual itself."""
    for index, layer in enumerate(layers):
        here = f"{path}.{index}"
        yield here, layer
        if isinstance(layer, Residual):
            yield from walk(layer.layers, f"{here}.layers")

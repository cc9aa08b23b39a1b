"""One example through the network a spec describes, by arithmetic only: weights, FLOPs, activations.

    forward_profile(spec) -> ForwardProfile

What the worker would measure with torch on one point (engine/kernels/kernel_cost.py:profile),
planned instead from the layer shapes (planner/architecture.py, graph_plan.py) or, for an
ONNX model, from what its upload found (model.stored). Per layer l with e_l output elements
per example, fan-in and width as in architecture.py, and T_l positions (1 for a vector, the
tokens, or H'·W' output pixels):

    flops       F₀ = Σ_l 2·T_l·fan_in_l·out_l        (matmuls and convolutions; attention adds
                                                       the scores and the mixing, 4·T²·m)
    saved       a = Σ_l κ_l·e_l                        elements autograd keeps for backward:
                κ = 1 after relu, tanh, sigmoid, identity (their output is saved and is the next
                layer's input); κ = 2 after gelu, softplus, swish, erf, quadratic (the input too);
                one more for a residual block's sum, and for a convolution (its output before σ, as
                a graph counts its conv2d and activation layers: the backend's backward keeps
                about that much more, measured in tests/engine/test_estimate_peaks.py)
    largest     max_l e_l                               the widest representation

An mlp, cnn or resnet is costed as the graph it is shorthand for (planner/builtin_graphs.py). κ is
that of a dense or conv2d layer and the activation layer right after it, together; every other
layer's output counts once (an activation layer elsewhere too), layer norm twice (the normalised
copy), attention its q, k, v, 2·heads·T² scores and probabilities, and the mixed values. An ONNX model's `saved` and F₀ are what its upload counted (stored), or
without them the bounds a = input + output elements and F₀ = 2·p (each weight used once);
its largest representation, unknown, is taken as a/2. What its upload counted beyond one example
(service/onnx_upload.py) is kept apart: the constants folded once at conversion (bytes, floats in the
job's dtype; the FLOPs of folding them) and the nodes run once per forward pass whatever the batch
(fixed elements and FLOPs, computed from weights only); 0 for every other model, and for ONNX models
uploaded before they were counted.
    ops         D = the framework operations one forward pass dispatches, whatever their size (the
                per-layer and per-node overhead of planner/estimate.py's seconds): 5 per weight
                layer (matmul or convolution, the parameterisation's scale, its bias) + 2 with a bias,
                2 per activation or other parameter-free layer, 2 per residual sum, 20 per attention
                layer; an ONNX model 2 per node (stored.nodes, counted at upload; unknown: the
                ONNX_NODES_UNKNOWN bound). Counted with a TorchDispatchMode on built networks: a
                dense + activation pair (an mlp layer) 7, a convolution 8; a backward pass
                dispatches about twice a forward's (tests/engine/test_time_estimate.py).
    tensors     the trainable parameter tensors (a weight, and its bias): the optimiser's per-tensor steps

The layers with a structured kernel rule become kernel_cost_model.LayerShape rows (a graph's
layer-norm affine γ, β a "norm" row); every weight of an ONNX model (an upper bound) is costed as a
fallback parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ntklab.api_schemas.graph import (
    ActivationLayer,
    Conv2d,
    Dense,
    Embedding,
    LayerNorm,
    PatchEmbed,
    Residual,
    SelfAttention,
)
from ntklab.api_schemas.graph_plan import PlannedLayer, layer_bias
from ntklab.api_schemas.spec import AnyModel, JobSpec, input_dim
from ntklab.planner.architecture import graph_input_shape, plan_model_graph
from ntklab.planner.builtin_graphs import as_graph
from ntklab.planner.kernel_cost_model import LayerShape, Profile

OUTPUT_SAVED = frozenset({"relu", "tanh", "sigmoid", "identity"})
WEIGHT_LAYER_OPS, BIAS_OPS, OTHER_LAYER_OPS, RESIDUAL_OPS, ATTENTION_OPS, ONNX_NODE_OPS = 5, 2, 2, 2, 20, 2
ONNX_NODES_UNKNOWN = 10_000
"""An ONNX model uploaded before its nodes were counted is costed at the default node cap (max_model_nodes)."""


@dataclass
class ForwardProfile:
    """One example: parameters (all, trainable, fallback), F₀ FLOPs, saved and largest activation
    elements, input elements d, outputs O, and the layers a structured kernel rule covers."""

    parameters: int = 0
    trainable: int = 0
    fallback: int = 0
    flops: float = 0.0
    saved: int = 0
    largest: int = 0
    input_elements: int = 0
    outputs: int = 1
    layers: list[LayerShape] = field(default_factory=list)
    constant_bytes: int = 0
    constant_elements: int = 0
    folding_flops: float = 0.0
    fixed_flops: float = 0.0
    fixed_saved: int = 0
    ops: int = 0
    tensors: int = 0

    @property
    def fixed(self) -> float:
        """F_fix = fixed FLOPs + fixed elements: one forward pass's work that does not scale with the batch (F's rule)."""
        return self.fixed_flops + self.fixed_saved

    def constants(self, itemsize: int) -> int:
        """Bytes of the folded constants in a job of `itemsize`-byte floats (they are counted at 8 bytes)."""
        return max(0, self.constant_bytes - (8 - itemsize) * self.constant_elements)

    def kernel_profile(self, itemsize: int) -> Profile:
        """The cost model's Profile: F = F₀ + a (one FLOP per saved activation, as the worker counts), plus F_fix and
        the fixed elements as though each point had a forward pass of its own: the worker's profile of one point
        measures them so, and a kernel method's cotangents, one per point and output, run back through those nodes
        (an upper bound for the forward's work, which batches them)."""
        saved = self.saved + self.fixed_saved
        return Profile(
            O=self.outputs,
            p=self.trainable,
            p_fallback=self.fallback,
            itemsize=itemsize,
            forward_flops=self.flops + self.saved + self.fixed,
            saved_bytes=saved * itemsize,
            activations=saved,
            layers=tuple(self.layers),
            fixed_bytes=self.fixed_saved * itemsize,
        )

    def add_weights(self, shape: LayerShape, parameters: int, *, trainable: bool = True) -> None:
        self.parameters += parameters
        if trainable:
            self.trainable += parameters
            self.layers.append(shape)
        self.flops += 2 * shape.T * shape.fan_in * shape.out if shape.kind != "embedding" else 0
        self.add_ops(WEIGHT_LAYER_OPS + BIAS_OPS * shape.bias, tensors=(1 + shape.bias) * trainable)

    def add_ops(self, ops: int, tensors: int = 0) -> None:
        self.ops += ops
        self.tensors += tensors

    def add_activations(self, elements: int, copies: int = 1) -> None:
        self.saved += copies * elements
        self.largest = max(self.largest, elements)


def forward_profile(spec: JobSpec) -> ForwardProfile:
    """The profile of one example; raises ValueError (naming the field) for a model that cannot be planned."""
    model = spec.model
    input_shape = spec.image_shape() or (input_dim(spec.data),)
    prof = ForwardProfile(input_elements=math.prod(input_shape), outputs=model.output_dim or 1)
    if model.kind == "onnx":
        _onnx(prof, spec)
    else:
        _graph(prof, spec, as_graph(model, input_shape), input_shape)
    return prof


def _readout(prof: ForwardProfile, spec: JobSpec, features: int) -> None:
    model = spec.model
    shape = LayerShape("dense", 1, features, prof.outputs, True, model.bias)
    prof.add_weights(shape, prof.outputs * features + prof.outputs * model.bias, trainable=model.train_output_layer)
    prof.add_activations(prof.outputs)


def _graph(prof: ForwardProfile, spec: JobSpec, graph: AnyModel, input_shape: tuple[int, ...]) -> None:
    plan = plan_model_graph(graph, input_shape)
    prof.input_elements = math.prod(graph_input_shape(graph, input_shape))
    _layers(prof, plan.layers, graph.bias)
    _readout(prof, spec, plan.features)


def _layers(prof: ForwardProfile, layers: tuple[PlannedLayer, ...], default_bias: bool) -> None:
    """The layers one after the other (an activation right after a dense or conv2d layer: κ for the pair)."""
    previous = None
    for planned in layers:
        _graph_layer(prof, planned, default_bias, after=previous)
        previous = planned.layer


def _graph_layer(prof: ForwardProfile, planned: PlannedLayer, default_bias: bool, *, after: object = None) -> None:
    """One layer's weights, operations and saved elements; `after` is the layer before it in its sequence (or None)."""
    layer, shape, out = planned.layer, planned.in_shape, planned.out_shape
    bias = layer_bias(layer, default_bias)
    if isinstance(layer, Dense):
        T = math.prod(shape[:-1])
        prof.add_weights(
            LayerShape("dense" if T == 1 and len(shape) == 1 else "shared", T, shape[-1], layer.width, True, bias),
            planned.parameters,
        )
    elif isinstance(layer, Conv2d):
        prof.add_weights(
            LayerShape("shared", out[1] * out[2], shape[0] * layer.kernel_size**2, layer.width, True, bias),
            planned.parameters,
        )
    elif isinstance(layer, (Embedding, PatchEmbed)):
        _embedding(prof, planned, bias)
    elif isinstance(layer, SelfAttention):
        _attention(prof, planned, bias)
        return
    elif isinstance(layer, LayerNorm):
        prof.parameters += planned.parameters
        prof.trainable += planned.parameters
        if planned.parameters:  # γ and β [C], read directly by F.layer_norm at the other axes' positions
            features = planned.parameters // 2
            prof.layers.append(LayerShape("norm", math.prod(out) // features, 1, features, True, True))
        prof.add_activations(math.prod(out), 2)
        prof.add_ops(OTHER_LAYER_OPS, tensors=2 * (planned.parameters > 0))
        return
    elif isinstance(layer, Residual):
        _residual(prof, planned, default_bias)
        return
    elif isinstance(layer, ActivationLayer) and isinstance(after, (Dense, Conv2d)):
        prof.add_ops(OTHER_LAYER_OPS)
        prof.add_activations(math.prod(out), _pair_copies(layer.name, convolution=isinstance(after, Conv2d)) - 1)
        return
    else:
        prof.add_ops(OTHER_LAYER_OPS)
    prof.add_activations(math.prod(out))


def _pair_copies(activation: str, *, convolution: bool) -> int:
    """κ of a weight layer and its activation: 1 (σ keeps its output) or 2 (its input too), one more after a
    convolution (module docstring); the weight layer counted one of them."""
    return (1 if activation in OUTPUT_SAVED else 2) + convolution


def _embedding(prof: ForwardProfile, planned: PlannedLayer, bias: bool) -> None:
    """Token or patch embedding, and its position embedding (an embedding read at 0…T−1)."""
    layer, shape, (tokens, width) = planned.layer, planned.in_shape, planned.out_shape
    if isinstance(layer, Embedding):
        table = layer.vocab * width
        prof.add_weights(LayerShape("embedding", tokens, layer.vocab, width, True, False), table)
    else:
        table = width * shape[0] * layer.patch**2 + width * bias
        prof.add_weights(LayerShape("shared", tokens, shape[0] * layer.patch**2, width, True, bias), table)
    if layer.positions:
        prof.add_weights(LayerShape("embedding", tokens, tokens, width, True, False), tokens * width)
        prof.add_activations(tokens * width)


def _attention(prof: ForwardProfile, planned: PlannedLayer, bias: bool) -> None:
    """Projections q, k, v (d → m) and out (m → d) over T tokens; scores and mixing 4·T²·m FLOPs."""
    (tokens, d), layer = planned.in_shape, planned.layer
    m, heads = layer.width, layer.heads
    for fan_in, out in ((d, m), (d, m), (d, m), (m, d)):
        prof.add_weights(LayerShape("shared", tokens, fan_in, out, True, bias), fan_in * out + out * bias)
    prof.flops += 4 * tokens * tokens * m
    prof.add_ops(ATTENTION_OPS - 4 * (WEIGHT_LAYER_OPS + BIAS_OPS * bias))
    prof.add_activations(3 * tokens * m + 2 * heads * tokens * tokens + tokens * m + tokens * d)


def _residual(prof: ForwardProfile, planned: PlannedLayer, default_bias: bool) -> None:
    """The branch's layers, the skip's bias-free projection where the shape changes, and the sum."""
    _layers(prof, planned.branch, default_bias)
    projection = planned.parameters - sum(inner.parameters for inner in planned.branch)
    if planned.projection_stride is not None:
        shape, out = planned.in_shape, planned.out_shape
        T = out[1] * out[2] if len(out) == 3 else math.prod(out[:-1])
        fan_in, width = (shape[0], out[0]) if len(shape) == 3 else (shape[-1], out[-1])
        kind = "dense" if len(shape) == 1 else "shared"
        prof.add_weights(LayerShape(kind, T, fan_in, width, True, False), projection)
    prof.add_activations(math.prod(planned.out_shape))
    prof.add_ops(RESIDUAL_OPS)


def _onnx(prof: ForwardProfile, spec: JobSpec) -> None:
    stored = spec.model.stored
    if stored is None:
        raise ValueError("model.id: the onnx model has not been looked up (resolve_uploads)")
    prof.parameters = prof.trainable = prof.fallback = stored.parameters
    prof.input_elements = math.prod(stored.input_shape)
    bound = prof.input_elements + stored.output_dim
    prof.saved = stored.activation_elements if stored.activation_elements is not None else bound
    prof.largest = prof.saved // 2
    prof.flops = stored.forward_flops if stored.forward_flops is not None else 2 * stored.parameters
    prof.constant_bytes, prof.constant_elements = stored.constant_bytes or 0, stored.constant_elements or 0
    prof.folding_flops = stored.folding_flops or 0
    prof.fixed_flops, prof.fixed_saved = stored.fixed_flops or 0, stored.fixed_elements or 0
    prof.ops = ONNX_NODE_OPS * (stored.nodes if stored.nodes is not None else ONNX_NODES_UNKNOWN)
    prof.tensors = stored.nodes if stored.nodes is not None else ONNX_NODES_UNKNOWN  # each weight read by a node

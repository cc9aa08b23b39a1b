"""The cost model behind `auto`: estimated FLOPs and memory of each kernel method for a net and n points.

A profile of one point (one forward pass) gives: F, the forward FLOPs per point (matmuls and
convolutions by torch's FlopCounterMode, plus one per activation saved for backward); s, the
bytes saved for backward per point; O; p trainable parameters, p_fb of them without a
structured rule; and per covered layer its positions T per point (all calls), fan-in, width
and kind. With b bytes per number, budget B (ntk.MEMORY_BUDGET_BYTES) and a backward pass ≈
F to the activations plus F to the weights:

    structured  FLOPs  n·F·(1 + O)                         forward + O backward passes to the layer outputs
                       + Σ_layers rule FLOPs                kernel_rules: dense, or min(per-sample, position sum)
                       + [p_fb > 0] ((k+1)/2)·n·F·(1 + 2O) + 2·(nO)²·p_fb     per-sample fallback, k panels
                memory n·s + 2·b·n·O·Σ_layers T·out        activations and cotangents (stacked)
    jacobian    FLOPs  n·F·(1 + 2O) + 2·(nO)²·p            O backward passes per point, then Σ J Jᵀ
                memory b·n·O·p + n·(1 + O)·s               the whole Jacobian and the vmapped passes
    ntk_vp      FLOPs  n·F·(1 + 5·n·O)                     one vjp, then n·O (vjp + jvp) pairs on the batch
                memory n·s + b·(3p + 8·n·a)                the saved forward and one column (a = s/b)

`memory` is what chunking cannot shrink; every chunked working set (per-sample gradients,
position-sum rows, fallback panels, NTK-vector-product blocks) is sized to B on top of it.
`auto` takes, of the methods whose memory is within B, the one with the fewest FLOPs
(ties: structured, jacobian, ntk_vp); if none is within B, the one with the least memory.
The embedding rule is costed with U = min(vocab, n·T) distinct tokens, an upper bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from workers.engine import kernel_rules
from workers.engine.layer_capture import capture
from workers.engine.layers import ScaledConv2d, ScaledEmbedding, ScaledLinear
from workers.engine.per_sample import SavedBytes, panel_and_chunk, passes

METHODS = ("structured", "jacobian", "ntk_vp")


@dataclass(frozen=True)
class LayerShape:
    """A covered layer as the rules see it: kind dense | shared | embedding, T positions per point."""

    kind: str
    T: int
    fan_in: int
    out: int
    weight: bool
    bias: bool


@dataclass(frozen=True)
class Profile:
    """One point's forward pass: F FLOPs, s bytes saved for backward, a = s/b activations (ntk_vp's block)."""

    O: int
    p: int
    p_fallback: int
    itemsize: int
    forward_flops: float
    saved_bytes: int
    activations: int
    layers: tuple[LayerShape, ...]


@dataclass(frozen=True)
class Cost:
    """Estimated FLOPs; memory that chunking cannot shrink; peak = memory + chunked working sets + K."""

    flops: float
    memory: float
    peak: float


def profile(net: nn.Module, x: Tensor, outputs: Callable[[Tensor], Tensor]) -> Profile:
    """The profile of the net on the first point of x."""
    with FlopCounterMode(display=False) as counter, SavedBytes(net) as saved_bytes:
        captured = capture(net, x[:1], outputs)
    saved = saved_bytes.total
    params = dict(net.named_parameters())
    trainable = [p for p in params.values() if p.requires_grad]
    itemsize = trainable[0].element_size() if trainable else 4
    return Profile(
        O=captured.y.shape[1],
        p=sum(p.numel() for p in trainable),
        p_fallback=sum(params[name].numel() for name in captured.fallback),
        itemsize=itemsize,
        forward_flops=counter.get_total_flops() + saved / itemsize,
        saved_bytes=saved,
        activations=saved // itemsize,
        layers=tuple(_layer_shape(layer, calls.inputs, calls.outputs, calls.weight, calls.bias)
                     for layer, calls in captured.layers.items()),
    )


def _layer_shape(layer, inputs, outputs, weight, bias) -> LayerShape:
    if isinstance(layer, ScaledConv2d):
        T = sum(z.shape[2] * z.shape[3] for z in outputs)
        return LayerShape("shared", T, layer.in_channels * layer.kernel_size**2, layer.out_channels, weight, bias)
    if isinstance(layer, ScaledEmbedding):
        return LayerShape("embedding", sum(t.numel() for t in inputs), layer.vocab, layer.width, weight, bias)
    assert isinstance(layer, ScaledLinear)
    if len(inputs) == 1 and inputs[0].dim() == 2:
        return LayerShape("dense", 1, layer.in_features, layer.out_features, weight, bias)
    T = sum(a.numel() // layer.in_features for a in inputs)
    return LayerShape("shared", T, layer.in_features, layer.out_features, weight, bias)


def ntk_vp_block(p: int, activations: int, rows: int, itemsize: int, budget: int) -> int:
    """Columns per vmapped NTK-vector product: each holds a tangent and a cotangent of size p and,
    through the batched forward, vjp and jvp, about eight copies of the activations a."""
    per_column = (3 * p + 8 * activations) * itemsize
    return max(1, min(rows, budget // per_column))


def method_costs(prof: Profile, n: int, budget: int) -> dict[str, Cost]:
    """Cost of each method for n points (module docstring)."""
    O, b, F, s = prof.O, prof.itemsize, prof.forward_flops, prof.saved_bytes
    rows = n * O
    K_bytes = b * rows * rows

    structured_flops = n * F * (1 + (O if prof.layers else 0))
    working = 0.0
    for layer in prof.layers:
        fan_in = min(layer.fan_in, n * layer.T) if layer.kind == "embedding" else layer.fan_in
        if layer.weight:
            structured_flops += kernel_rules.rule_flops(layer.kind, n, O, layer.T, fan_in, layer.out, b, budget)
            working = max(working, min(budget, b * rows * fan_in * layer.out, b * rows * rows * layer.T**2))
        if layer.bias:
            structured_flops += kernel_rules.bias_flops(n, O, layer.T, layer.out)
    if prof.p_fallback:
        q, m = panel_and_chunk(n, O, prof.p_fallback, b, s, budget)
        structured_flops += passes(n, q) * n * F * (1 + 2 * O) + 2 * rows**2 * prof.p_fallback
        working = max(working, (q + m) * O * prof.p_fallback * b + m * (1 + O) * s)
    structured_memory = n * s + 2 * b * rows * sum(layer.T * layer.out for layer in prof.layers)

    jacobian_memory = b * rows * prof.p + n * (1 + O) * s
    column = (3 * prof.p + 8 * n * prof.activations) * b
    ntk_vp_memory = n * s + column
    columns = ntk_vp_block(prof.p, n * prof.activations, rows, b, budget)
    return {
        "structured": Cost(structured_flops, structured_memory, structured_memory + working + K_bytes),
        "jacobian": Cost(n * F * (1 + 2 * O) + 2 * rows**2 * prof.p, jacobian_memory, jacobian_memory + K_bytes),
        "ntk_vp": Cost(n * F * (1 + 5 * rows), ntk_vp_memory, ntk_vp_memory + (columns - 1) * column + K_bytes),
    }


def cheapest(costs: dict[str, Cost], budget: int) -> str:
    """Fewest FLOPs among the methods whose memory is within the budget, else the least memory."""
    fitting = [m for m in METHODS if costs[m].memory <= budget]
    if fitting:
        return min(fitting, key=lambda m: costs[m].flops)
    return min(METHODS, key=lambda m: costs[m].memory)

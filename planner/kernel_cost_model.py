"""The tangent-kernel cost model, by arithmetic only: FLOPs and memory of each kernel method.

The worker measures a `Profile` of its network with torch (engine/kernels/kernel_cost.py:
profile) and `auto` picks the method from it (engine/kernels/ntk.py); the service builds the
same Profile from the spec's layer plan (planner/forward_profile.py) to estimate a job
before it runs (planner/estimate.py). Both read these formulas, so they cannot drift.

A profile of one point (one forward pass) gives: F, the forward FLOPs per point (matmuls and
convolutions, plus one per activation saved for backward); s, the bytes saved for backward
per point; O; p trainable parameters, p_fb of them without a structured rule; and per covered
layer its positions T per point (all calls), fan-in, width and kind. f ≤ s of the saved bytes are
computed from the weights alone (an uploaded graph's constant-free weight transforms, such as an
LSTM's gate splits): a forward over n points saves them once, S(n) = n·(s − f) + f, while a
cotangent still runs back through them per point and output. With b bytes per number,
budget B (MEMORY_BUDGET_BYTES) and a backward pass ≈ F to the activations plus F to the weights:

    structured  FLOPs  n·F·(1 + O)                         forward + O backward passes to the layer outputs
                       + Σ_layers rule FLOPs                dense, or min(per-sample, position sum), below
                       + [p_fb > 0] ((k+1)/2)·n·F·(1 + 2O) + 2·(nO)²·p_fb     per-sample fallback, k panels
                memory S(n) + 2·b·n·O·Σ_layers T·out       activations and cotangents (stacked)
    jacobian    FLOPs  n·F·(1 + 2O) + γ·2·(nO)²·p          O backward passes per point, then Σ J Jᵀ
                memory b·n·O·p + S(n) + n·O·s               the whole Jacobian and the vmapped passes
    ntk_vp      FLOPs  n·F·(1 + 5·n·O)                     one vjp, then n·O (vjp + jvp) pairs on the batch
                memory S(n) + b·(3p + 8·n·a)               the saved forward and one column (a = s/b)

`memory` is what chunking cannot shrink; every chunked working set (per-sample gradients,
position-sum rows, fallback panels, NTK-vector-product blocks) is sized to B on top of it.
`auto` takes, of the methods whose memory is within B, the one with the fewest FLOPs
(ties: structured, jacobian, ntk_vp); if none is within B, the one with the least memory.
The embedding rule is costed with U = min(vocab, n·T) distinct tokens, an upper bound.

Rule FLOPs (multiply-add = 2; engine/kernels/kernel_rules.py computes the rules), with in the
fan-in, out the width, U distinct tokens:

    dense          2n²·in + γ·2(nO)²·out + 2(nO)²     (the input Gram AAᵀ once for all O×O output pairs)
    shared weight  per-sample 2·n·O·T·in·out + γ·2·(nO)²·in·out
                   position sum 2·n²·T²·in + 2·n²·O²·T²·out + 2·n²·O²·T²
    embedding      per-sample n·O·T·w + γ·2·(nO)²·U·w;  position sum (nT)² + 2n²O²T²·w + 2n²O²T²
    bias           n·O·T·out + γ·2(nO)²·out
    norm           2·n·O·T·out + γ·2(nO)²·out          (a parameter read directly, kind "norm": a normalisation's
                                                          scale γ [out] on x̂ at T positions; its shift β, an additive
                                                          table or a class token, T·out = the call's output per point,
                                                          costed as a bias)

γ = block_fraction(n·O) = (1 + 1/k)/2: every Gram X Xᵀ of [n·O, width] rows (the dense rule's GGᵀ,
a per-sample J Jᵀ, a bias, the jacobian method's Σ J Jᵀ) is multiplied only on its k(k+1)/2 blocks
on and above the diagonal, k = ⌈n·O / BLOCK_ROWS⌉ (engine/kernels/symmetric_gram.py); the
fallback's panels are not blocked.

Per-sample is taken when its single-feature chunk (n·O·in·b) fits B and its FLOPs are at most
POSITION_SUM_SLOWDOWN = 8 times the position sum's, whose memory-bound einsums run far below
GEMM speed; `rule_flops` reports a position sum's FLOPs so weighted.

Per-sample fallback panels (engine/kernels/per_sample.py): q = clamp(⌊(B/2)/(O·p_S·b)⌋, 1, n)
points kept per panel, m = clamp(⌊(B/2)/(O·p_S·b + (1+O)·s)⌋, 1, q) per vmap(jacrev) call,
(k+1)/2 passes over the n points for k = ⌈n/q⌉ panels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

METHODS = ("structured", "jacobian", "ntk_vp")
MEMORY_BUDGET_BYTES = 256 * 2**20
POSITION_SUM_SLOWDOWN = 8
BLOCK_ROWS = 640
"""Rows of one block of a symmetric Gram (engine/kernels/symmetric_gram.py): large enough for GEMM speed, small
enough to skip ~3/8 of a Gram of 2560 rows."""


def block_fraction(rows: int, O: int = 1) -> float:
    """Share of a full [rows, rows] Gram's FLOPs that symmetric_gram multiplies: (1 + 1/k)/2 for k blocks a side,
    each block the most whole points (O rows each) within BLOCK_ROWS."""
    block = max(1, BLOCK_ROWS // O) * O
    k = -(-rows // block)
    return (1 + 1 / k) / 2


@dataclass(frozen=True)
class LayerShape:
    """A covered layer as the rules see it: kind dense | shared | embedding | norm, T positions per point
    (norm: a parameter read directly, weight = a scale γ on x̂, bias = a shift or additive table; fan_in 1)."""

    kind: str
    T: int
    fan_in: int
    out: int
    weight: bool
    bias: bool


@dataclass(frozen=True)
class Profile:
    """One point's forward pass: F FLOPs, s bytes saved for backward, a = s/b activations (ntk_vp's block), f of the
    s bytes computed from the weights alone (saved once per batch; 0 where unknown, as in the worker's profile)."""

    O: int
    p: int
    p_fallback: int
    itemsize: int
    forward_flops: float
    saved_bytes: int
    activations: int
    layers: tuple[LayerShape, ...]
    fixed_bytes: int = 0

    def forward_saved(self, n: int) -> int:
        """S(n) = n·(s − f) + f: the bytes a forward pass over n points saves for backward."""
        return n * (self.saved_bytes - self.fixed_bytes) + self.fixed_bytes


@dataclass(frozen=True)
class Cost:
    """Estimated FLOPs; memory that chunking cannot shrink; peak = memory + chunked working sets + K."""

    flops: float
    memory: float
    peak: float


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
            structured_flops += rule_flops(layer.kind, n, O, layer.T, fan_in, layer.out, b, budget)
            working = max(working, min(budget, b * rows * fan_in * layer.out, b * rows * rows * layer.T**2))
        if layer.bias:
            structured_flops += bias_flops(n, O, layer.T, layer.out)
    if prof.p_fallback:
        q, m = panel_and_chunk(n, O, prof.p_fallback, b, s, budget)
        structured_flops += passes(n, q) * n * F * (1 + 2 * O) + 2 * rows**2 * prof.p_fallback
        working = max(working, (q + m) * O * prof.p_fallback * b + m * (1 + O) * s)
    forward = prof.forward_saved(n)
    structured_memory = forward + 2 * b * rows * sum(layer.T * layer.out for layer in prof.layers)

    jacobian_memory = b * rows * prof.p + forward + n * O * s
    column = (3 * prof.p + 8 * n * prof.activations) * b
    ntk_vp_memory = forward + column
    columns = ntk_vp_block(prof.p, n * prof.activations, rows, b, budget)
    return {
        "structured": Cost(structured_flops, structured_memory, structured_memory + working + K_bytes),
        "jacobian": Cost(n * F * (1 + 2 * O) + gram_flops(n, O, prof.p), jacobian_memory, jacobian_memory + K_bytes),
        "ntk_vp": Cost(n * F * (1 + 5 * rows), ntk_vp_memory, ntk_vp_memory + (columns - 1) * column + K_bytes),
    }


def cheapest(costs: dict[str, Cost], budget: int) -> str:
    """Fewest FLOPs among the methods whose memory is within the budget, else the least memory."""
    fitting = [m for m in METHODS if costs[m].memory <= budget]
    if fitting:
        return min(fitting, key=lambda m: costs[m].flops)
    return min(METHODS, key=lambda m: costs[m].memory)


def ntk_vp_block(p: int, activations: int, rows: int, itemsize: int, budget: int) -> int:
    """Columns per vmapped NTK-vector product: each holds a tangent and a cotangent of size p and,
    through the batched forward, vjp and jvp, about eight copies of the activations a."""
    per_column = (3 * p + 8 * activations) * itemsize
    return max(1, min(rows, budget // per_column))


# --------------------------------------------------------------------------- FLOPs of each rule


def use_per_sample(per_sample_flops: float, position_sum_flops: float, smallest_chunk_bytes: int, budget: int) -> bool:
    return per_sample_flops <= POSITION_SUM_SLOWDOWN * position_sum_flops and smallest_chunk_bytes <= budget


def gram_flops(n: int, O: int, width: int) -> float:
    """FLOPs of the symmetric Gram X Xᵀ of X [n·O, width] by blocks: 2·(nO)²·width·block_fraction(nO)."""
    return 2 * (n * O) ** 2 * width * block_fraction(n * O, O)


def dense_flops(n: int, O: int, fan_in: int, out: int) -> float:
    return 2 * n * n * fan_in + gram_flops(n, O, out) + 2 * (n * O) ** 2


def shared_weight_flops(n: int, O: int, T: int, fan_in: int, out: int) -> tuple[float, float]:
    """(per-sample, position sum) FLOPs of a weight shared over T positions."""
    per_sample = 2 * n * O * T * fan_in * out + gram_flops(n, O, fan_in * out)
    position_sum = 2 * n * n * T * T * fan_in + 2 * (n * O * T) ** 2 * out + 2 * (n * O * T) ** 2
    return per_sample, position_sum


def embedding_flops(n: int, O: int, T: int, U: int, width: int) -> tuple[float, float]:
    """(per-sample, position sum) FLOPs of an embedding read at T positions, U distinct tokens."""
    per_sample = n * O * T * width + gram_flops(n, O, U * width)
    position_sum = (n * T) ** 2 + 2 * (n * O * T) ** 2 * width + 2 * (n * O * T) ** 2
    return per_sample, position_sum


def bias_flops(n: int, O: int, T: int, out: int) -> float:
    return n * O * T * out + gram_flops(n, O, out)


def norm_scale_flops(n: int, O: int, T: int, out: int) -> float:
    """FLOPs of a scale γ [out] on x̂ at T positions: J = Σ_t g ⊙ x̂ (a product and a sum), then its Gram."""
    return 2 * n * O * T * out + gram_flops(n, O, out)


def rule_flops(kind: str, n: int, O: int, T: int, fan_in: int, out: int, itemsize: int, budget: int) -> float:
    """FLOPs of the weight rule the layer would use, a position sum's weighted by POSITION_SUM_SLOWDOWN
    (kind: dense | shared | embedding; embedding: fan_in = U)."""
    if kind == "dense":
        return dense_flops(n, O, fan_in, out)
    if kind == "norm":
        return norm_scale_flops(n, O, T, out)
    flops = shared_weight_flops(n, O, T, fan_in, out) if kind == "shared" else embedding_flops(n, O, T, fan_in, out)
    return flops[0] if use_per_sample(*flops, n * O * fan_in * itemsize, budget) else POSITION_SUM_SLOWDOWN * flops[1]


# --------------------------------------------------------------------------- per-sample fallback panels


def panel_and_chunk(n: int, O: int, p: int, itemsize: int, saved_bytes: int, budget: int) -> tuple[int, int]:
    """(q, m): points per kept panel of J_S and per vmap(jacrev) call (module docstring)."""
    half = budget / 2
    q = min(n, max(1, math.floor(half / (O * p * itemsize))))
    m = min(q, max(1, math.floor(half / (O * p * itemsize + (1 + O) * saved_bytes))))
    return q, m


def passes(n: int, q: int) -> float:
    """Per-sample gradients computed, in units of n points: (k+1)/2 for k = ⌈n/q⌉ panels."""
    return (math.ceil(n / q) + 1) / 2

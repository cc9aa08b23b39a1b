"""bench_graph_kernels.ViT as a pure function of its parameters, over a NumPy-like array module.

    logits [n, O] = vit_logits(params, x, scales=…, xp=…, erf=…, heads=…)

The neural-tangents port of the ViT row: stax has no class token, learned position table or this
attention's head split, so neural-tangents' empirical NTK differentiates this function (xp =
jax.numpy, erf = jax.scipy.special.erf) in bench/peers/nt_worker.py; tests run it with numpy and
scipy against the torch module. params (what is differentiated): name -> array in torch's names
and layouts (nt_export.vit_problem); scales: scaled layer name -> its multipliers (c, β),
constants; x [n, 1, H, W]. The same steps as the torch module, d = 32, T = 1 + HW/4 tokens, d_h = d / heads:

    patches  2×2, stride 2 (the patch conv, no overlap): P [n, HW/4, 4], positions row-major,
             columns in W.reshape(d, 4)'s order
    tokens   c·P Wᵀ + β·b                                                       [n, HW/4, d]
    h        [cls; tokens] + position                                           [n, T, d]
    block    u = LN₁(h); q, k, v = c·u Wᵀ + β·b, split into heads               [n, heads, T, d_h]
             h ← h + o(softmax(q kᵀ / √d_h) v);  h ← h + fc₂(gelu(fc₁(LN₂ h)))
    logits   readout(LN(h[:, 0]))                                               [n, O]

LayerNorm: (h − mean) / √(var + 1e-5) · γ + β over the last axis, biased variance (torch's);
gelu the exact form ½u(1 + erf(u/√2)), torch's default (jax.nn.gelu's default is the tanh
approximation, which would not agree).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

EPS = 1e-5


def vit_logits(params: Mapping, x, *, scales: Mapping, xp, erf: Callable, heads: int):
    """[n, O] logits of the one-block ViT (module docstring) on x [n, 1, H, W]."""
    n, _, H, W = x.shape
    patches = x.reshape(n, 1, H // 2, 2, W // 2, 2).transpose(0, 2, 4, 1, 3, 5).reshape(n, H * W // 4, 4)
    d = params["patch.weight"].shape[0]
    tokens = _linear(params, scales, "patch", patches, params["patch.weight"].reshape(d, 4))
    cls = xp.broadcast_to(params["cls"], (n, 1, d))
    h = xp.concatenate([cls, tokens], axis=1) + params["position"]
    u = _layer_norm(params, "blocks.0.ln1", h, xp)
    h = h + _linear(params, scales, "blocks.0.o", _attention(params, scales, u, xp, heads))
    hidden = _linear(params, scales, "blocks.0.fc1", _layer_norm(params, "blocks.0.ln2", h, xp))
    h = h + _linear(params, scales, "blocks.0.fc2", 0.5 * hidden * (1 + erf(hidden / math.sqrt(2))))
    return _linear(params, scales, "readout", _layer_norm(params, "ln", h[:, 0], xp))


def vit_arguments(problem: dict) -> tuple[dict, dict]:
    """(params, scales) of vit_function.vit_logits from nt_export.vit_problem's arrays (or the npz they were saved to)."""
    params = {key.removeprefix("param:"): problem[key] for key in problem if key.startswith("param:")}
    scales = {
        key.removeprefix("c:"): (float(problem[key]), float(problem["beta:" + key.removeprefix("c:")]))
        for key in problem
        if key.startswith("c:")
    }
    return params, scales


def _attention(params: Mapping, scales: Mapping, u, xp, heads: int):
    """softmax(q kᵀ / √d_h) v per head, heads concatenated back: [n, T, d]."""
    n, T, d = u.shape
    q, k, v = (
        _linear(params, scales, f"blocks.0.{name}", u).reshape(n, T, heads, d // heads).transpose(0, 2, 1, 3)
        for name in ("q", "k", "v")
    )
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(d // heads)
    weights = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
    weights = weights / xp.sum(weights, axis=-1, keepdims=True)
    return (weights @ v).transpose(0, 2, 1, 3).reshape(n, T, d)


def _linear(params: Mapping, scales: Mapping, name: str, u, weight=None):
    """c·u Wᵀ + β·b over the last axis of u (W the layer's weight unless given reshaped)."""
    c, beta = scales[name]
    weight = params[f"{name}.weight"] if weight is None else weight
    return c * (u @ weight.T) + beta * params[f"{name}.bias"]


def _layer_norm(params: Mapping, name: str, h, xp):
    mean = xp.mean(h, axis=-1, keepdims=True)
    variance = xp.mean((h - mean) ** 2, axis=-1, keepdims=True)
    return (h - mean) / xp.sqrt(variance + EPS) * params[f"{name}.weight"] + params[f"{name}.bias"]

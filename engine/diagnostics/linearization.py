"""How far the trained model is from its first-order Taylor model around w₀.

On the probe set X [n, …], with trainable weights w (frozen ones held fixed),

    f_lin(w) = f(w₀) + ∇f(w₀)(w − w₀)                     (one JVP at w₀, tangent w − w₀)
    error(w) = ‖f(w) − f_lin(w)‖_F / ‖f(w) − f(w₀)‖_F      (norms over the [n, O] array)

for the logits f and, alongside, for the outputs φ(f). The error is 0 for a model that
is linear in its weights and undefined (None) at w = w₀. Beside it, how far training moved
the weights (weight_change): the ℓ2 and ℓ∞ norms of w − w₀.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn
from torch.func import functional_call, jvp

from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.base import head_of


def linearization_errors(
    net: nn.Module, x: Tensor, w0: Mapping[str, Tensor], w: Mapping[str, Tensor], *, logits: Tensor | None = None
) -> dict[str, float | None]:
    """{"logits": error of f, "outputs": error of φ(f)} at weights w, for the Taylor model around w₀.

    x [n, …]; w0 and w map each trainable parameter's name to its tensor (same names, same
    shapes); the net's other parameters are used as they are. Any module: without a `head`
    attribute its outputs are its logits (activations.head_of), and the two errors agree.
    logits: f(w; x) [n, O] when the caller already has it (run.py's per-step forward), else one
    forward pass here; the JVP at w₀ is always computed.
    """
    w = {name: t.detach() for name, t in w.items()}
    delta = {name: w[name] - w0[name] for name in w}

    def logits_and_outputs(weights: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        logits = functional_call(net, weights, (x,), strict=False)
        return logits, apply_head(head_of(net), logits)

    with torch.no_grad():
        (f0, phi0), (df, dphi) = jvp(logits_and_outputs, (dict(w0),), (delta,))
        f, phi = logits_and_outputs(w) if logits is None else (logits, apply_head(head_of(net), logits))
    return {"logits": relative_residual(f, f0, df), "outputs": relative_residual(phi, phi0, dphi)}


def relative_residual(f: Tensor, f0: Tensor, df: Tensor) -> float | None:
    """‖f − (f0 + df)‖ / ‖f − f0‖, or None when f = f0."""
    moved = torch.linalg.vector_norm(f - f0).item()
    if moved == 0.0:
        return None
    return torch.linalg.vector_norm(f - f0 - df).item() / moved


def weight_change(w: Mapping[str, Tensor], w0: Mapping[str, Tensor]) -> tuple[float, float]:
    """(‖w − w₀‖₂, ‖w − w₀‖_∞), in the weights' dtype.

    w and w0 map each trainable parameter's name to a tensor of the same shape; the norms
    are over all of them flattened into one vector [p] (every tensor flattened and
    concatenated). The values are the raw parameters, before each layer's parameterization
    multiplier (docs/diagnostics.md, "Weights format"). Under the NTK parameterization the
    paper predicts ‖w* − w₀‖₂ = O(1) and ‖w* − w₀‖_∞ = O(1/√m) in the width m.
    """
    delta = torch.cat([(w[name].detach() - w0[name]).flatten() for name in w])
    return torch.linalg.vector_norm(delta).item(), torch.linalg.vector_norm(delta, ord=float("inf")).item()

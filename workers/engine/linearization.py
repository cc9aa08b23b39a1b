"""How far the trained model is from its first-order Taylor model around w₀.

On the probe set X [n, …], with trainable weights w (frozen ones held fixed),

    f_lin(w) = f(w₀) + ∇f(w₀)(w − w₀)                     (one JVP at w₀, tangent w − w₀)
    error(w) = ‖f(w) − f_lin(w)‖_F / ‖f(w) − f(w₀)‖_F      (norms over the [n, O] array)

for the logits f and, alongside, for the outputs φ(f). The error is 0 for a model that
is linear in its weights and undefined (None) at w = w₀.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.func import functional_call, jvp

from workers.engine.activations import apply_head
from workers.engine.nets import Network, trainable_parameters


class Linearization:
    """The Taylor model of `net` around its weights at construction time, on inputs x."""

    def __init__(self, net: Network, x: Tensor) -> None:
        self.net = net
        self.x = x
        self.w0 = {name: p.detach().clone() for name, p in trainable_parameters(net).items()}

    def errors(self) -> dict[str, float | None]:
        """{"logits": error of f, "outputs": error of φ(f)} at the network's current weights."""
        w = {name: p.detach() for name, p in trainable_parameters(self.net).items()}
        delta = {name: w[name] - self.w0[name] for name in w}
        with torch.no_grad():
            (f0, phi0), (df, dphi) = jvp(self._logits_and_outputs, (self.w0,), (delta,))
            f, phi = self._logits_and_outputs(w)
        return {"logits": relative_residual(f, f0, df), "outputs": relative_residual(phi, phi0, dphi)}

    def _logits_and_outputs(self, weights: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        logits = functional_call(self.net, weights, (self.x,), strict=False)
        return logits, apply_head(self.net.head, logits)


def relative_residual(f: Tensor, f0: Tensor, df: Tensor) -> float | None:
    """‖f − (f0 + df)‖ / ‖f − f0‖, or None when f = f0."""
    moved = torch.linalg.vector_norm(f - f0).item()
    if moved == 0.0:
        return None
    return torch.linalg.vector_norm(f - f0 - df).item() / moved

"""The loss Hessian split into its Gauss–Newton part and the rest, and the PL* constant.

Over the training set (x_i, y_i), i = 1…n, with F [n, O] the function the loss reads (outputs
φ(f) for mse, logits for cross-entropy) and J = ∂F/∂w [n·O, p] (operators.py):

    ∇²L = G + R,   G = (1/n) Jᵀ ∇²ℓ J,   R = (1/n) Σ_i Σ_a (∂ℓ/∂F_ia) ∇²_w F_ia

G ⪰ 0 has the non-zero eigenvalues of (1/n) D^½ K D^½ with K = J Jᵀ the tangent kernel on the
training set and D the blocks ∇²ℓ_i (D = I for mse: λ_max(G) = λ_max(K)/n). Transition to
linearity (Liu, Zhu & Belkin 2020): ‖∇²_w f_a‖ = Õ(1/√m) for a linear head, so ‖R‖ falls with
the width m while G does not; a non-linear head φ keeps the Θ(1) term φ''(f) ∇f ∇fᵀ in ∇²φ(f)
and R stays Θ(1) while the residual ∂ℓ/∂F is.

PL* (Liu, Zhu & Belkin 2022): for mse, ‖∇L‖² = (1/n²) rᵀ K r ≥ (2 λ_min(K)/n) · L with
r = F − y, so L satisfies the PL* inequality ½‖∇L‖² ≥ μ L with μ = λ_min(K(w))/n, and gradient
descent converges linearly while λ_min(K(w_t)) stays away from 0.

Norms are spectral, ‖A‖₂ = max |λ|, by Lanczos on each operator from the same Gaussian start:
at most `iterations` steps, fewer once the top Ritz value's residual bound is ≤ tolerance·|θ|.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ntklab.engine.callbacks import Checkpoint, no_checkpoint
from ntklab.engine.curvature.linear_operator import LinearOperator
from ntklab.engine.curvature.operators import (
    gauss_newton_operator,
    loss_hessian_operator,
    loss_reads,
    residual_operator,
)
from ntklab.engine.curvature.spectral_estimators import spectral_norm
from ntklab.engine.kernels.ntk import kernel_spectrum, tangent_kernel


@dataclass
class LossHessianSplit:
    """‖∇²L‖₂, ‖G‖₂, ‖∇²L − G‖₂ = ‖R‖₂, λ_min(K) of F on the training set, and the HVPs spent (≤ 3·iterations)."""

    norm: float
    gauss_newton_norm: float
    rest_norm: float
    kernel_lambda_min: float
    hvps: int


def loss_hessian_split(
    net: nn.Module,
    x: Tensor,
    y: Tensor,
    loss: str,
    *,
    iterations: int = 32,
    tolerance: float = 1e-6,
    kernel_method: str = "auto",
    checkpoint: Checkpoint = no_checkpoint,
) -> LossHessianSplit:
    """The split at the network's current weights over the points x [n, ...] with targets y [n, O];
    checkpoint() is called after each Hessian-vector product and inside the kernel (ntk.py)."""
    operators = [op(net, x, y, loss) for op in (loss_hessian_operator, gauss_newton_operator, residual_operator)]
    norms = [_norm(op, iterations, tolerance, checkpoint) for op in operators]
    kernel = tangent_kernel(net, x, method=kernel_method, of=loss_reads(loss), checkpoint=checkpoint)
    return LossHessianSplit(*norms, kernel_spectrum(kernel)[0], sum(op.products for op in operators))


def _norm(operator: LinearOperator, iterations: int, tolerance: float, checkpoint: Checkpoint) -> float:
    return spectral_norm(
        operator.observed(lambda rows: checkpoint()),
        steps=iterations,
        tolerance=tolerance,
        generator=torch.Generator().manual_seed(0),
    )

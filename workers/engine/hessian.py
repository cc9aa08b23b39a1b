"""The model Hessian ∇²_w f_a(w; x_i) (of the network, not of the loss) by Lanczos on HVPs.

Hessian-vector products are forward-over-reverse: H v = d/dε ∇_w f_a(w + εv; x_i) at ε = 0,
i.e. torch.func.jvp of torch.func.grad, over the flat vector w ∈ R^p of trainable
parameters. Lanczos with full reorthogonalisation (vectors and coefficients in float64)
builds the tridiagonal T_k = Qᵀ H Q; its eigenvalues (scipy eigh_tridiagonal) are the Ritz
values, and the extreme ones converge first. The spectral norm ‖H‖₂ = max |λ|.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from scipy.linalg import eigh_tridiagonal
from torch import Tensor, nn
from torch.func import functional_call, grad, jvp

from workers.engine.activations import apply_head
from workers.engine.nets import trainable_parameters


@dataclass
class HessianReport:
    """norm = max over probe points and outputs of ‖∇²_w f_a(w; x_i)‖₂.

    norms [P][O], eigenvalues [P][O][k] (signed, by |λ| descending), grad_norms [P][O] = ‖∇_w f_a(x_i)‖,
    hvps = Hessian-vector products spent.
    """

    norm: float
    norms: list[list[float]]
    eigenvalues: list[list[list[float]]]
    grad_norms: list[list[float]]
    hvps: int


class _PointFunction:
    """w ↦ f_a(w; x_i) (or φ(f)_a) over the flat trainable parameter vector w [p]."""

    def __init__(self, net: nn.Module, x_i: Tensor, a: int, of: str) -> None:
        params = trainable_parameters(net)
        self.net, self.a, self.of = net, a, of
        self.x = x_i if x_i.dim() in (2, 4) and x_i.shape[0] == 1 else x_i.unsqueeze(0)
        self.names = list(params)
        self.shapes = [p.shape for p in params.values()]
        self.sizes = [p.numel() for p in params.values()]
        self.w = torch.cat([p.detach().reshape(-1) for p in params.values()])

    def __call__(self, w: Tensor) -> Tensor:
        pieces = torch.split(w, self.sizes)
        params = {name: t.reshape(shape) for name, t, shape in zip(self.names, pieces, self.shapes)}
        logits = functional_call(self.net, params, (self.x,))
        y = apply_head(self.net.head, logits) if self.of == "outputs" else logits
        return y[0, self.a]


def hessian_vector_product(net: nn.Module, x_i: Tensor, a: int, v: Tensor, *, of: str = "outputs") -> Tensor:
    """∇²_w f_a(w; x_i) · v for one point x_i (with or without a batch dim of 1); v and the result are flat [p]."""
    return _hvp_operator(_PointFunction(net, x_i, a, of))(v)


def _hvp_operator(f: _PointFunction) -> Callable[[Tensor], Tensor]:
    gradient = grad(f)

    def matvec(v: Tensor) -> Tensor:
        with torch.no_grad():
            return jvp(gradient, (f.w,), (v.to(f.w.dtype),))[1]

    return matvec


def lanczos_top_eigenvalues(
    matvec: Callable[[Tensor], Tensor],
    dim: int,
    *,
    iterations: int = 32,
    top_k: int = 1,
    dtype: torch.dtype,
    device: torch.device | str,
    generator: torch.Generator | None = None,
) -> list[float]:
    """Top-k eigenvalues by magnitude (signed, |λ| descending) of a symmetric operator on R^dim.

    min(iterations, dim) Lanczos steps from a Gaussian start vector (drawn on the CPU from
    `generator`); matvec receives vectors in `dtype` on `device`. Stops early when the
    Krylov space is invariant (β below ~eps·‖T‖), where the Ritz values are exact; Lanczos
    sees distinct eigenvalues only, so it then returns fewer than top_k values when the
    operator has fewer distinct eigenvalues than that (multiplicities are not resolved).
    """
    steps = min(iterations, dim)
    basis = torch.zeros(steps, dim, dtype=torch.float64, device=device)
    q = torch.randn(dim, generator=generator, dtype=torch.float64).to(device)
    q /= torch.linalg.norm(q)
    alphas: list[float] = []
    betas: list[float] = []
    tolerance = 10 * torch.finfo(dtype).eps
    scale = 0.0
    for j in range(steps):
        basis[j] = q
        w = matvec(q.to(dtype)).to(torch.float64)
        alpha = float(w @ q)
        alphas.append(alpha)
        for _ in range(2):
            w -= basis[: j + 1].T @ (basis[: j + 1] @ w)
        beta = float(torch.linalg.norm(w))
        scale = max(scale, abs(alpha), beta)
        if j == steps - 1 or beta <= tolerance * scale:
            break
        betas.append(beta)
        q = w / beta
    ritz = eigh_tridiagonal(np.array(alphas), np.array(betas), eigvals_only=True)
    ordered = sorted(ritz.tolist(), key=abs, reverse=True)
    return ordered[:top_k]


def model_hessian(
    net: nn.Module, x_probe: Tensor, *, of: str = "outputs", top_k: int = 1, iterations: int = 32
) -> HessianReport:
    """Lanczos on ∇²_w f_a(w; x_i) for every probe point x_i ([P, ...]) and output a."""
    generator = torch.Generator().manual_seed(0)
    counter = _Counter()
    norms, eigenvalues, grad_norms = [], [], []
    output_dim = net.output_dim
    for x_i in x_probe:
        point_norms, point_eigs, point_grads = [], [], []
        for a in range(output_dim):
            f = _PointFunction(net, x_i, a, of)
            with torch.no_grad():
                point_grads.append(float(torch.linalg.norm(grad(f)(f.w))))
            eigs = lanczos_top_eigenvalues(
                counter.wrap(_hvp_operator(f)),
                f.w.numel(),
                iterations=iterations,
                top_k=top_k,
                dtype=f.w.dtype,
                device=f.w.device,
                generator=generator,
            )
            point_eigs.append(eigs)
            point_norms.append(abs(eigs[0]))
        norms.append(point_norms)
        eigenvalues.append(point_eigs)
        grad_norms.append(point_grads)
    return HessianReport(max(max(row) for row in norms), norms, eigenvalues, grad_norms, counter.calls)


class _Counter:
    def __init__(self) -> None:
        self.calls = 0

    def wrap(self, matvec: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
        def counted(v: Tensor) -> Tensor:
            self.calls += 1
            return matvec(v)

        return counted

"""The model Hessian ∇²_w f_a(w; x_i) (of the network, not of the loss): top-k eigenvalues with bounds.

For every probe point x_i and each of its first `outputs` outputs a (default every output) — a run —
the top-k eigenvalues by magnitude of
H_ia = ∇²_w y_a(w; x_i) over the flat trainable parameters w ∈ R^p, each with a bound on
its error, by one of two methods chosen by cost:

    lanczos  (p > iterations)  Lanczos on Hessian-vector products (engine/curvature/lanczos.py):
             all runs advance together, one vmapped reverse-over-reverse product per step for
             every unfinished run (the batched model-Hessian operator of
             engine/curvature/operators.py); a run stops when its top-k
             residual bounds |β_k s_i[k]| are ≤ tolerance·|θ_i|, when its Krylov space is
             invariant, or after `iterations` products (the cap). Runs that stop leave the batch.
    dense    (p ≤ iterations)  H_ia from p products with the unit vectors — never more than the
             Lanczos cap would spend, in one batched pass — symmetrised, then eigvalsh in
             float64. Bound = ‖(H − Hᵀ)/2‖_F + p·ε₆₄·‖H‖₂: the asymmetry the products' rounding
             left, plus eigvalsh's backward error. Eigenvalues are listed with multiplicity.

The spectral norm ‖H_ia‖₂ = max |λ|. Start vectors are Gaussian, drawn from a CPU generator
seeded 0, one per run in the order (point, output), so the values do not depend on how the
runs are batched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import grad, vmap

from ntklab.engine.curvature.flat_parameters import FlatParameters
from ntklab.engine.curvature.lanczos import RitzValues, lanczos_many
from ntklab.engine.curvature.linear_operator import LinearOperator
from ntklab.engine.curvature.operators import budget_batch, model_hessian_operator
from ntklab.engine.kernels.kernel_cost import MEMORY_BUDGET_BYTES

Progress = Callable[[int, int], None]
"""progress(hvps_done, hvps_planned), called after each batched product."""


@dataclass
class HessianReport:
    """norm = max over probe points and outputs of ‖∇²_w f_a(w; x_i)‖₂, within norm_bound of the true max
    (the largest bound of a norm); the rest [P][O] per run.

    eigenvalues [P][O][k] (signed, by |λ| descending) and bounds [P][O][k] (|θ − λ| ≤ bound
    for some eigenvalue λ); norms [P][O] = |eigenvalues[..][..][0]|; grad_norms [P][O] =
    ‖∇_w f_a(x_i)‖; run_hvps [P][O] = Hessian-vector products spent per run; methods [P][O]
    = "lanczos" | "dense"; hvps = their total.
    """

    norm: float
    norm_bound: float
    norms: list[list[float]]
    eigenvalues: list[list[list[float]]]
    bounds: list[list[list[float]]]
    grad_norms: list[list[float]]
    run_hvps: list[list[int]]
    methods: list[list[str]]
    hvps: int


def model_hessian(
    net: nn.Module,
    x_probe: Tensor,
    *,
    of: str = "outputs",
    top_k: int = 1,
    outputs: int | None = None,
    iterations: int = 100,
    tolerance: float = 1e-6,
    max_batch: int | None = None,
    progress: Progress | None = None,
) -> HessianReport:
    """Top-k eigenvalues of ∇²_w y_a(w; x_i) with bounds, for every probe point x_i ([P, ...]) and output a < outputs
    (None: every output).

    iterations caps the products per run; tolerance (relative) certifies a Lanczos run, 0 runs
    every run to the cap; max_batch = products per vmapped call (default: the memory budget).
    """
    batch = max_batch or budget_batch(FlatParameters(net), x_probe, of, MEMORY_BUDGET_BYTES // 2)
    H = model_hessian_operator(net, x_probe, of=of, outputs=outputs, max_batch=batch)
    runs = Runs(x_probe, H.members // len(x_probe))
    grad_norms = gradient_norms(net, x_probe, of=of, outputs=runs.outputs, max_batch=batch).tolist()
    if H.dim <= iterations:
        ritz, method = dense_eigenvalues(H, top_k=top_k, progress=progress), "dense"
    else:
        ritz, method = (
            lanczos_eigenvalues(H, top_k=top_k, steps=iterations, tolerance=tolerance, progress=progress),
            "lanczos",
        )
    return report(runs, ritz, grad_norms, method)


def gradient_norms(net: nn.Module, x: Tensor, *, of: str, outputs: int, max_batch: int) -> Tensor:
    """‖∇_w F_a(w; x_i)‖ [P·outputs] in run order r = i·outputs + a, vmapped over `max_batch` runs at a time."""
    flat = FlatParameters(net)
    x = x.to(flat.w.device)
    units = torch.eye(flat.output_dim(x), dtype=flat.w.dtype, device=flat.w.device)[:outputs]
    runs = torch.arange(len(x) * outputs)
    gradient = vmap(grad(flat.output), in_dims=(None, 0, 0, None))
    with torch.no_grad():
        return torch.cat(
            [
                torch.linalg.norm(gradient(flat.w, x[r // outputs], units[r % outputs], of), dim=1)
                for r in runs.split(max_batch)
            ]
        )


class Runs:
    """Run r = (point r // O, output r % O) over the probe points x [P, ...] and their first O outputs."""

    def __init__(self, x: Tensor, outputs: int) -> None:
        self.outputs = outputs
        self.all = list(range(len(x) * outputs))

    def grid(self, flat: list) -> list[list]:
        """[P·O] in run order -> [P][O]."""
        return [flat[i : i + self.outputs] for i in range(0, len(flat), self.outputs)]


def lanczos_eigenvalues(
    H: LinearOperator, *, top_k: int, steps: int, tolerance: float, progress: Progress | None
) -> list[RitzValues]:
    """Lanczos on every run, the unfinished ones multiplied together; as many bases as half the budget holds."""
    basis_bytes = 8 * H.dim * (min(steps, H.dim) + 2)
    return lanczos_many(
        H,
        steps=steps,
        top_k=top_k,
        tolerance=tolerance,
        generator=torch.Generator().manual_seed(0),
        max_active=max(1, (MEMORY_BUDGET_BYTES // 2) // basis_bytes),
        progress=progress,
    )


def dense_eigenvalues(H: LinearOperator, *, top_k: int, progress: Progress | None) -> list[RitzValues]:
    """eigvalsh of each run's H_r [p, p] from its p products with the unit vectors, in groups within the budget."""
    p = H.dim
    identity = torch.eye(p, dtype=H.dtype, device=H.device)
    group = max(1, (MEMORY_BUDGET_BYTES // 2) // (8 * p * p))
    results = []
    for start in range(0, H.members, group):
        ids = range(start, min(start + group, H.members))
        repeated = [r for r in ids for _ in range(p)]
        products = H.apply(identity.repeat(len(ids), 1), repeated)
        results += [dense_top(H_r, top_k) for H_r in products.reshape(len(ids), p, p).to(torch.float64)]
        if progress is not None:
            progress(p * len(results), p * H.members)
    return results


def dense_top(H: Tensor, top_k: int) -> RitzValues:
    """Top-k eigenvalues of (H + Hᵀ)/2 by |λ| with the bound of the module docstring; H [p, p] float64."""
    p = H.shape[0]
    eigenvalues = torch.linalg.eigvalsh((H + H.T) / 2)
    top = sorted(eigenvalues.tolist(), key=abs, reverse=True)[:top_k]
    bound = float(torch.linalg.norm((H - H.T) / 2)) + p * torch.finfo(torch.float64).eps * abs(top[0])
    return RitzValues(top, [bound] * len(top), p)


def report(runs: Runs, ritz: list[RitzValues], grad_norms: list[float], method: str) -> HessianReport:
    norms = [abs(r.values[0]) for r in ritz]
    return HessianReport(
        norm=max(norms),
        norm_bound=max(r.bounds[0] for r in ritz),
        norms=runs.grid(norms),
        eigenvalues=runs.grid([r.values for r in ritz]),
        bounds=runs.grid([r.bounds for r in ritz]),
        grad_norms=runs.grid(grad_norms),
        run_hvps=runs.grid([r.matvecs for r in ritz]),
        methods=runs.grid([method] * len(ritz)),
        hvps=sum(r.matvecs for r in ritz),
    )


def hessian_vector_product(net: nn.Module, x_i: Tensor, a: int, v: Tensor, *, of: str = "outputs") -> Tensor:
    """∇²_w y_a(w; x_i) · v for one point x_i (with or without a batch dim of 1); v and the result are flat [p]."""
    point = x_i[0] if x_i.dim() in (2, 4) and x_i.shape[0] == 1 else x_i
    H = model_hessian_operator(net, point.unsqueeze(0), of=of, max_batch=1)
    return H.apply(v.unsqueeze(0), [a])[0]


def hessian_grad_ratio(
    hessian_norms: Sequence[Sequence[float]], grad_norms: Sequence[Sequence[float]], *, power: int = 1
) -> float | None:
    """max over points i and outputs a of hessian_norms[i][a] / grad_norms[i][a]**power, both [P][O].

    The model Hessian measured against the gradient: small means near-linear. Proposition 2.2 of
    the paper bounds the change of the tangent kernel over a ball of radius R around w by
    O(‖H‖·R); for a wide network ‖∇_w f‖ stays Θ(1) while ‖H‖ = Õ(1/√m) (§3.3), so the model is
    near-linear where the ratio is small. Per probe point i and output a, from the Hessian norms
    and gradient norms of the same (i, a),

        ratio = max_{i,a} ‖∇²_w f_a(w; x_i)‖₂ / ‖∇_w f_a(w; x_i)‖^power

    power 1 is that ratio; power 2 divides by the kernel's diagonal K[(i,a),(i,a)] =
    ‖∇_w f_a(x_i)‖², which a reparameterization rescaling every layer by the same factor
    leaves unchanged.

    Pairs with a zero gradient are left out (the ratio is undefined there); None when every
    gradient is zero (e.g. all-zero inputs to a network without biases).
    """
    ratios = [h / g**power for row_h, row_g in zip(hessian_norms, grad_norms) for h, g in zip(row_h, row_g) if g > 0]
    return max(ratios) if ratios else None

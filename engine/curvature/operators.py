"""The curvature of the model and of the loss, and the tangent kernel, as linear operators.

Every operator is a linear_operator.LinearOperator built on the flat parameters w [p] of
flat_parameters.py (all trainable ones, or one parameter group's: the diagonal block), with F
the function of w a quantity reads, J = ∂F/∂w [n·O, p], and products by torch.func that never
form a matrix:

    model Hessian   H_r = ∇²_w F_a(w; x_i) for the runs r = i·O' + a (points × outputs), one operator
                    batched over the runs: H_r v_r = vjp(grad(w ↦ ⟨e_a, F(w; x_i)⟩), w)(v_r),
                    vmapped over the (x_i, e_a, v_r) of a block of rows, w shared
    loss Hessian    ∇²L(w) v   = vjp(grad(L), w)(v)
    Gauss–Newton    G v = (1/n) Jᵀ ∇²ℓ J v:   u = J v (jvp of F), h = ∇²ℓ·u per point (jvp of ∇ℓ),
                                              G v = Jᵀ h / n (vjp of F)
    the rest        R v = (1/n) Σ_i Σ_a g_ia ∇²_w F_ia v = vjp(grad(w ↦ (1/n) Σ g_ia F_ia(w)), w)(v),
                    g = ∂ℓ/∂F at the current w, held fixed
    tangent kernel  K v = J (Jᵀ v) on R^{n·O} (v indexed i·O + a, as engine/kernels/ntk.py's K):
                    one vjp of F, then one jvp

with L(w) = (1/n) Σ_i ℓ(F(w; x_i), y_i) the training loss of engine/training/loop.py: F the outputs
φ(f) for mse (ℓ = ½‖F − y‖², ∇²ℓ = I) and the logits f for cross-entropy (ℓ = −y·log softmax F,
∇²ℓ = (Σ_a y_a)(diag p − p pᵀ); integer class labels c [n] are y = e_c, engine/training/losses.py).
The chain rule makes the split exact: ∇²L = G + R. K is the kernel on the n·O outputs rather than
JᵀJ on R^p: it is the kernel the rest of the engine computes (as a matrix), n·O ≪ p in the
regimes this service studies, and JᵀJ shares its non-zero eigenvalues (G = JᵀJ/n for mse).

Two ways to multiply, by what a product shares. A single operator (the loss Hessian, the rest,
one model-Hessian run H[r]) builds ∇s and its graph once at w (vjp of grad) and pays one
backward pass per product (or per vmapped block). The batched model Hessian's runs differ in
their point x_i, so each block of rows is one vmapped reverse-over-reverse call from scratch;
on the CPU that takes 0.4–0.65 of the time of forward-over-reverse (jvp of grad), whose
forward-mode rules run through Python decompositions (measured per vmapped call, 2 threads:
quickstart 0.9 vs 2.1 ms, a conv resnet with 40 rows 5.0 vs 10.1 ms, an mlp of 10⁵ weights 1.1
vs 3.4 ms; equal at 4 M weights). Its blocks are chunked to at most `max_batch` rows; by default
as many as fit a memory budget B (bytes):

    max_batch = max(1, ⌊B / (4·s + 6·p·b)⌋)

s = the bytes one point's forward saves for backward (per_sample.saved_bytes_per_point),
b = bytes per number: reverse-over-reverse holds the forward's saved tensors and the first
backward's graph (≈ 4 s at most) and about six p-vectors per row (v, the gradient, the
vector-Jacobian product's cotangents, the parameter gradients, the result).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import grad, jvp, vjp, vmap

from ntklab.engine.curvature.flat_parameters import FlatParameters
from ntklab.engine.curvature.linear_operator import LinearOperator
from ntklab.engine.kernels.kernel_cost import MEMORY_BUDGET_BYTES
from ntklab.engine.kernels.per_sample import saved_bytes_per_point
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.base import head_of
from ntklab.engine.training.losses import summed_loss


def loss_reads(loss: str) -> str:
    """The function of the network a loss reads: "outputs" φ(f) for mse, "logits" f for cross-entropy."""
    return "outputs" if loss == "mse" else "logits"


def model_hessian_operator(
    net: nn.Module,
    x: Tensor,
    *,
    of: str = "outputs",
    outputs: int | None = None,
    names: list[str] | None = None,
    max_batch: int | None = None,
) -> LinearOperator:
    """H_r = ∇²_w F_a(w; x_i) for every point x_i of x [n, ...] and output a < O' = outputs (None: every
    output), batched over the runs r = i·O' + a; max_batch rows per vmapped call (default: half the
    memory budget, module docstring). A member H[r] is linearised at w once."""
    flat = FlatParameters(net, names)
    width = flat.output_dim(x)
    per_point = min(outputs or width, width)
    x = x.to(flat.w.device)
    units = torch.eye(width, dtype=flat.w.dtype, device=flat.w.device)[:per_point]
    gradient = grad(flat.output)
    product = vmap(lambda x_i, u, v: vjp(lambda w: gradient(w, x_i, u, of), flat.w)[1](v)[0])
    chunk: list[int] = [max_batch] if max_batch else []

    def products(V: Tensor, members: Tensor | None) -> Tensor:
        if not chunk:
            chunk.append(budget_batch(flat, x, of, MEMORY_BUDGET_BYTES // 2))
        runs = (torch.zeros(len(V), dtype=torch.int64) if members is None else members).to(x.device)
        points, picks = x[runs // per_point], units[runs % per_point]
        return torch.cat(
            [
                product(points[s : s + chunk[0]], picks[s : s + chunk[0]], V[s : s + chunk[0]])
                for s in range(0, len(V), chunk[0])
            ]
        )

    def member(r: int) -> LinearOperator:
        x_i, u = x[r // per_point], units[r % per_point]
        return _hessian_operator(lambda w: flat.output(w, x_i, u, of), flat.w)

    return LinearOperator(
        products, flat.dim, dtype=flat.w.dtype, device=flat.w.device, members=len(x) * per_point, member=member
    )


def budget_batch(flat: FlatParameters, x: Tensor, of: str, budget: int) -> int:
    """max(1, ⌊B / (4·s + 6·p·b)⌋) rows per vmapped model-Hessian call (module docstring)."""
    head = head_of(flat.net) if of == "outputs" else "identity"
    saved = saved_bytes_per_point(flat.net, x[:1], lambda logits: apply_head(head, logits))
    per_row = 4 * saved + 6 * flat.dim * flat.w.element_size()
    return max(1, budget // per_row)


def loss_hessian_operator(
    net: nn.Module, x: Tensor, y: Tensor, loss: str, *, names: list[str] | None = None
) -> LinearOperator:
    """∇²L(w) over the points x [n, ...] with targets y [n, O] (or class labels [n])."""
    flat, ell, of = FlatParameters(net, names), summed_loss(loss), loss_reads(loss)
    return _hessian_operator(lambda w: ell(flat.outputs(w, x, of), y) / len(x), flat.w)


def gauss_newton_operator(net: nn.Module, x: Tensor, y: Tensor, loss: str) -> LinearOperator:
    """G = (1/n) Jᵀ ∇²ℓ J: one jvp of F, one jvp of ∇ℓ on the [n, O] outputs, one vjp of F."""
    flat, ell, of = FlatParameters(net), summed_loss(loss), loss_reads(loss)

    def function(w: Tensor) -> Tensor:
        return flat.outputs(w, x, of)

    outputs, pullback = vjp(function, flat.w)
    outputs = outputs.detach()
    loss_gradient = grad(lambda out: ell(out, y))

    def matvec(v: Tensor) -> Tensor:
        u = jvp(function, (flat.w,), (v,))[1]
        h = jvp(loss_gradient, (outputs,), (u,))[1]
        return pullback(h / len(x))[0]

    return _single(matvec, flat.w)


def residual_operator(net: nn.Module, x: Tensor, y: Tensor, loss: str) -> LinearOperator:
    """R = ∇²L − G = (1/n) Σ_i Σ_a (∂ℓ/∂F_ia) ∇²_w F_ia, the loss gradient g = ∂ℓ/∂F at the current w held fixed."""
    flat, ell, of = FlatParameters(net), summed_loss(loss), loss_reads(loss)
    with torch.no_grad():
        g = grad(lambda out: ell(out, y))(flat.outputs(flat.w, x, of)) / len(x)
    return _hessian_operator(lambda w: (g * flat.outputs(w, x, of)).sum(), flat.w)


def tangent_kernel_operator(net: nn.Module, x: Tensor, *, of: str = "outputs") -> LinearOperator:
    """K = J Jᵀ on R^{n·O} over the points x [n, ...], of the outputs or the logits: v ↦ J (Jᵀ v)."""
    flat = FlatParameters(net)

    def function(w: Tensor) -> Tensor:
        return flat.outputs(w, x, of)

    outputs, pullback = vjp(function, flat.w)

    def matvec(v: Tensor) -> Tensor:
        u = pullback(v.reshape(outputs.shape))[0]
        return jvp(function, (flat.w,), (u,))[1].reshape(-1)

    return _single(matvec, outputs.detach().reshape(-1))


def _hessian_operator(scalar: Callable[[Tensor], Tensor], w: Tensor) -> LinearOperator:
    """∇²s(w) v as the pullback of ∇s at w (reverse over reverse; ∇²s is symmetric, so vᵀ∇²s = (∇²s v)ᵀ):
    ∇s and its graph are built once, each product (or vmapped block of them) is one backward pass."""
    _, pullback = vjp(grad(scalar), w)
    return _single(lambda v: pullback(v)[0], w)


def _single(matvec: Callable[[Tensor], Tensor], like: Tensor) -> LinearOperator:
    """One operator on R^{like.numel()} (like's dtype and device) from its matvec, vmapped over a block of rows."""

    def products(V: Tensor, members: Tensor | None) -> Tensor:
        return matvec(V[0]).unsqueeze(0) if V.shape[0] == 1 else vmap(matvec)(V)

    return LinearOperator(products, like.numel(), dtype=like.dtype, device=like.device)

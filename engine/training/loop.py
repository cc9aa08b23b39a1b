"""Training: the loss, the optimizer, the automatic step size and the loop.

Losses over the training set (x_i, y_i), i = 1…n, with logits f(x_i) ∈ R^O and outputs φ(f):

    mse:            L(w) = (1/2n) Σ_i ‖φ(f(w; x_i)) − y_i‖²
    cross_entropy:  L(w) = −(1/n) Σ_i Σ_a y_ia log softmax(f(w; x_i))_a   (y [n, C])
                    L(w) = −(1/n) Σ_i log softmax(f(w; x_i))_{c_i}        (class labels c [n])

Cross-entropy always reads the logits, so a softmax head and an identity head give the
same loss. `gd` is full-batch gradient descent; `sgd`, `momentum` (heavy ball) and
`adam` use minibatches of `batch_size` drawn without replacement per epoch (full batch
when batch_size is unset). The loss recorded at step t is the full training loss at w_t,
before the t-th update.

lr = "auto" has no value when the tangent kernel at w₀ is zero on the probe set (every
output's gradient vanishes there: all-zero inputs to a network without biases): the run
then evaluates w₀ only and ends with outcome "zero_kernel", keeping what it measured.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from ntklab.api_schemas.spec import TrainingSpec
from ntklab.engine.callbacks import Callbacks, JobCancelled, Progress
from ntklab.engine.nets.base import TangentNetwork
from ntklab.engine.nets.network import trainable_parameters
from ntklab.engine.training.data import Dataset
from ntklab.engine.training.losses import summed_loss

Observer = Callable[[int, float, bool], None]
"""observe(step, loss at w_step, final) — called at every step before the update."""


@dataclass(frozen=True)
class TrainingOutcome:
    """How training ended: `steps` updates applied; `final_loss` is the loss at w_steps."""

    outcome: str  # converged | max_steps | time_budget | diverged | zero_kernel
    steps: int
    final_loss: float
    diverged_step: int | None = None


ZERO_KERNEL = "zero_kernel"

HEAD_SLOPE: dict[str, float] = {"identity": 1.0, "tanh": 1.0, "sigmoid": 0.25, "swish": 1.0998393, "softmax": 0.5}
"""L_φ = sup_z ‖∂φ/∂z‖₂ of each head (swish: φ'(2.3994); softmax: ‖diag(p) − ppᵀ‖ ≤ 1/2)."""


def auto_lr(logits_lambda_max: float, n_probe: int, *, head: str, loss: str) -> float | None:
    """η = n_probe / (c · λ_max(K_logits(w₀))): 1/λ_max of a bound on the Gauss–Newton loss Hessian.

    mse: H_GN = (1/n) J_fᵀ D J_f with J_f the (n·O) × p Jacobian of the logits and D the
    blocks (∂φ/∂f)ᵀ(∂φ/∂f) ⪯ L_φ² I, so λ_max(H_GN) ≤ c · λ_max(K_logits)/n with c = L_φ².
    With the identity head this is exactly n / λ_max(K(w₀)), half the stability limit
    2/λ_max of gradient descent on the quadratic model at init. With a non-linear head the
    bound holds along the whole path, where the outputs' kernel itself grows (swish:
    φ'(0)² = 1/4 at init, up to L_φ² ≈ 1.21) and a step taken from K_outputs(w₀) would cross
    the stability limit.
    cross_entropy: H_GN = (1/n) J_fᵀ (diag p − p pᵀ) J_f and diag p − p pᵀ ⪯ ½ I, so c = 1
    leaves a further factor ≥ 2: η · λ_max(H_GN) ≤ ½, four times inside the limit.
    None when λ_max = 0 (K_logits(w₀) = 0): no step size follows from a kernel that vanishes.
    """
    if logits_lambda_max <= 0:
        return None
    slope_squared = 1.0 if loss == "cross_entropy" else HEAD_SLOPE[head] ** 2
    return n_probe / (slope_squared * logits_lambda_max)


def loss_function(name: str, net: TangentNetwork) -> Callable[[Tensor, Tensor], Tensor]:
    """L(x [b, …], y [b, O] or class labels [b]) → scalar, as defined in the module docstring."""
    reads, summed = (net.outputs if name == "mse" else net), summed_loss(name)
    return lambda x, y: summed(reads(x), y) / len(x)


def make_optimizer(spec: TrainingSpec, params: list[Tensor], lr: float) -> torch.optim.Optimizer:
    if spec.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr)
    momentum = spec.momentum if spec.optimizer == "momentum" else 0.0
    return torch.optim.SGD(params, lr=lr, momentum=momentum)


def minibatches(n: int, batch_size: int, seed: int) -> Iterator[Tensor]:
    """Index tensors of `batch_size` points; each epoch is a fresh seeded permutation."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield from torch.randperm(n, generator=generator).split(batch_size)


def train(
    net: TangentNetwork,
    data: Dataset,
    spec: TrainingSpec,
    *,
    lr: float | None,
    seed: int,
    callbacks: Callbacks,
    observe: Observer,
) -> TrainingOutcome:
    """Optimise until target_loss, max_steps or time_budget_s; a non-finite loss ends it as "diverged".

    lr None (lr = "auto" without a value): w₀ is evaluated and observed, and training ends there
    as "zero_kernel" (or "converged" when w₀ already meets target_loss).
    """
    x, y = data.x_train, data.y_train
    loss_of = loss_function(spec.loss, net)
    optimizer = None if lr is None else make_optimizer(spec, list(trainable_parameters(net).values()), lr)
    full_batch = spec.optimizer == "gd" or spec.batch_size is None or spec.batch_size >= len(x)
    batches = None if full_batch else minibatches(len(x), spec.batch_size, seed)
    started, step = time.perf_counter(), 0
    while True:
        if callbacks.cancelled():
            raise JobCancelled(f"cancelled at step {step}")
        with torch.set_grad_enabled(full_batch):
            loss = loss_of(x, y)
        value, elapsed = loss.item(), time.perf_counter() - started
        if not math.isfinite(value):
            return TrainingOutcome("diverged", step, value, diverged_step=step)
        stop = stop_reason(spec, value, step, elapsed) or (ZERO_KERNEL if optimizer is None else None)
        observe(step, value, stop is not None)
        callbacks.progress(Progress(step, spec.max_steps, "train", eta_s(spec, step, elapsed)))
        if stop is not None:
            return TrainingOutcome(stop, step, value)
        optimizer.zero_grad(set_to_none=True)
        if batches is not None:
            batch = next(batches).to(x.device)
            loss = loss_of(x[batch], y[batch])
        loss.backward()
        optimizer.step()
        step += 1


def stop_reason(spec: TrainingSpec, loss: float, step: int, elapsed_s: float) -> str | None:
    if spec.target_loss is not None and loss <= spec.target_loss:
        return "converged"
    if step >= spec.max_steps:
        return "max_steps"
    if spec.time_budget_s is not None and elapsed_s >= spec.time_budget_s:
        return "time_budget"
    return None


def eta_s(spec: TrainingSpec, step: int, elapsed_s: float) -> float | None:
    """Seconds left at the mean pace so far, capped by what is left of the time budget."""
    if step == 0:
        return None
    eta = elapsed_s / step * (spec.max_steps - step)
    if spec.time_budget_s is not None:
        eta = min(eta, max(spec.time_budget_s - elapsed_s, 0.0))
    return eta

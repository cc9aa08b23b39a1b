"""The warnings of a finished run: results that should not be read at face value.

    run_warnings(spec, net, data, w0, hessians, summary) -> [RunWarning]

Each check is one function returning its warnings (api_schemas/run_warnings.py has the codes):

kernel_dominated_by_group   tr K_g(w₀) / tr K(w₀) > 90 % for one trainable tensor g of two or more
                            (engine/kernels/ntk.py): ΔK, λ_max(K₀) and lr "auto" then
                            describe that one tensor — e.g. a bias with too large a multiplier.
target_loss_not_reached     outcome max_steps or time_budget with target_loss set (and max_steps > 0).
head_cannot_reach_targets   mse only: a training target lies outside the closure of the head's
                            image (HEAD_IMAGE; softmax rows must also sum to 1), so the loss has a
                            floor above 0 — e.g. a sigmoid head on targets in [−1, 1].
hessian_not_converged       a reported eigenvalue θ (the one that sets ‖H‖ at its point and output)
                            whose residual bound exceeds tolerance·|θ| (diagnostics.hessian.tolerance;
                            none with tolerance 0, which asks for every run to go to the cap).
head_curvature_zero         the Hessian was measured of the outputs φ(f) through a head whose
                            second derivative vanishes at f = 0 (tanh, sigmoid, a two-class
                            softmax): ∇²φ(f) = φ'(f)·∇²f + φ''(f)·∇f∇fᵀ loses its second term as
                            the logits shrink, so ‖H‖ falls for a reason other than width.
infinite_width_quadrature_inexact   Θ∞'s largest estimated quadrature error exceeds
                            diagnostics.infinite_width.quadrature_tolerance (the polar rule's
                            work cap, engine/limits/gauss_hermite.py MAX_POLAR_PAIRS, was reached).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.func import functional_call, hessian

from ntklab.api_schemas.run_warnings import RunWarning
from ntklab.api_schemas.spec import HessianDiagnostics, InfiniteWidthDiagnostics, JobSpec, TrainingSpec
from ntklab.engine.curvature.hessian import HessianReport
from ntklab.engine.kernels.ntk import kernel_trace_by_parameter
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.base import head_of
from ntklab.engine.training.data import Dataset

DOMINANT_SHARE = 0.9
SWISH_MIN = -0.2784645427610738
"""min_z z·σ(z), at z ≈ −1.2785 (tests/engine/test_run_warnings.py checks it by minimisation)."""
HEAD_IMAGE: dict[str, tuple[float, float]] = {
    "identity": (-math.inf, math.inf),
    "swish": (SWISH_MIN, math.inf),
    "tanh": (-1.0, 1.0),
    "sigmoid": (0.0, 1.0),
    "softmax": (0.0, 1.0),
}
"""The closure of each head's image, per output (softmax: also Σ_a φ_a = 1)."""
TARGET_SLACK = 1e-6
CURVATURE_ZERO = 1e-12


def run_warnings(
    spec: JobSpec,
    net: nn.Module,
    data: Dataset,
    w0: dict[str, Tensor],
    hessians: dict[str, HessianReport | None],
    summary: dict,
) -> list[RunWarning]:
    """Every warning the run earned, in the order of the module docstring."""
    head = head_of(net)
    return [
        *kernel_dominated_by_group(kernel_trace_by_parameter(net, data.x_probe, w0)),
        *target_loss_not_reached(spec.training, summary),
        *head_cannot_reach_targets(head, spec.training.loss, data.y_train),
        *hessian_not_converged(hessians, spec.diagnostics.hessian),
        *head_curvature_zero(net, head, w0, data.x_probe, spec.diagnostics.hessian),
        *quadrature_above_tolerance(spec.diagnostics.infinite_width, summary),
    ]


def quadrature_above_tolerance(limit: InfiniteWidthDiagnostics | None, summary: dict) -> list[RunWarning]:
    """One warning when Θ∞'s quadrature error (kernel_inf_quadrature_error, an estimate per pair, the
    largest) exceeds quadrature_tolerance: the polar rule's work cap (gauss_hermite.MAX_POLAR_PAIRS) left
    pairs on Mehler's series with a larger bound."""
    error = summary.get("kernel_inf_quadrature_error")
    if limit is None or error is None or error <= limit.quadrature_tolerance:
        return []
    return [
        RunWarning(
            code="infinite_width_quadrature_inexact",
            message=f"Θ∞ and Σ∞ are accurate to {error:.2g} (relative), not the {limit.quadrature_tolerance:g} asked: "
            f"the quadrature's work cap was reached; kernel_inf_distance is exact to about that error",
            values={"error": error, "tolerance": limit.quadrature_tolerance},
        )
    ]


def kernel_dominated_by_group(traces: dict[str, float]) -> list[RunWarning]:
    """One warning when a single tensor of two or more carries more than DOMINANT_SHARE of tr K(w₀)."""
    total = sum(traces.values())
    if len(traces) < 2 or not total > 0:
        return []
    group, trace = max(traces.items(), key=lambda item: item[1])
    share = trace / total
    if share <= DOMINANT_SHARE:
        return []
    return [
        RunWarning(
            code="kernel_dominated_by_group",
            message=f"{group} carries {share:.1%} of the trace of the tangent kernel at init: ΔK, the kernel's spectrum "
            f"and lr 'auto' mostly describe this one tensor, not the network",
            values={"group": group, "share": share, "trace": trace, "total_trace": total, "groups": len(traces)},
        )
    ]


def target_loss_not_reached(training: TrainingSpec, summary: dict) -> list[RunWarning]:
    """One warning when training stopped at max_steps or the time budget with the loss above target_loss."""
    outcome = summary.get("outcome")
    if training.target_loss is None or training.max_steps == 0 or outcome not in ("max_steps", "time_budget"):
        return []
    final_loss = summary.get("final_loss")
    return [
        RunWarning(
            code="target_loss_not_reached",
            message=f"training stopped at {outcome} (step {summary.get('steps')}) with loss {final_loss:.3g} above "
            f"target_loss {training.target_loss:g}: the diagnostics describe an unfinished path",
            values={
                "outcome": outcome,
                "steps": summary.get("steps"),
                "final_loss": final_loss,
                "target_loss": training.target_loss,
            },
        )
    ]


def head_cannot_reach_targets(head: str, loss: str, y: Tensor) -> list[RunWarning]:
    """One warning (mse) when targets y [n, O] lie outside the closure of the head's image."""
    if loss != "mse" or head not in HEAD_IMAGE:
        return []
    low, high = HEAD_IMAGE[head]
    y64 = y.detach().to(torch.float64)
    outside = (y64 < low - TARGET_SLACK) | (y64 > high + TARGET_SLACK)
    points = outside.any(dim=1)
    if head == "softmax":
        points |= (y64.sum(dim=1) - 1).abs() > TARGET_SLACK * y64.shape[1]
    count = int(points.sum())
    if count == 0:
        return []
    image = "the simplex (each output in [0, 1], summing to 1)" if head == "softmax" else f"[{low:.4g}, {high:.4g}]"
    return [
        RunWarning(
            code="head_cannot_reach_targets",
            message=f"{count} of {len(y64)} training targets lie outside what the {head} head can output, {image}: "
            f"the loss cannot reach 0",
            values={
                "head": head,
                "image": [_finite(low), _finite(high)],
                "targets_min": float(y64.min()),
                "targets_max": float(y64.max()),
                "points_outside": count,
                "points": len(y64),
            },
        )
    ]


def hessian_not_converged(
    hessians: dict[str, HessianReport | None], wanted: HessianDiagnostics | None
) -> list[RunWarning]:
    """One warning per Hessian report (init, final) with a value whose bound exceeds tolerance·|θ|."""
    if wanted is None or wanted.tolerance == 0:  # tolerance 0 runs every run to the cap: no tolerance to meet
        return []
    tolerance = wanted.tolerance
    found = []
    for when, report in hessians.items():
        if report is None:
            continue
        runs = [
            (values[0], bounds[0])
            for row_v, row_b in zip(report.eigenvalues, report.bounds)
            for values, bounds in zip(row_v, row_b)
            if values
        ]
        late = [bound / abs(theta) if theta else math.inf for theta, bound in runs if bound > tolerance * abs(theta)]
        if late:
            found.append(
                RunWarning(
                    code="hessian_not_converged",
                    message=f"{len(late)} of {len(runs)} Hessian values at {when} did not reach the relative tolerance "
                    f"{tolerance:g} within {wanted.iterations} iterations (worst relative bound {max(late):.2g}): "
                    f"hessian_norm_{when} may be off by that much",
                    values={
                        "when": when,
                        "values_not_converged": len(late),
                        "values": len(runs),
                        "tolerance": tolerance,
                        "worst_relative_bound": _finite(max(late)),
                        "iterations": wanted.iterations,
                    },
                )
            )
    return found


def head_curvature_zero(
    net: nn.Module, head: str, w0: dict[str, Tensor], x: Tensor, wanted: HessianDiagnostics | None
) -> list[RunWarning]:
    """One warning when the Hessian of the outputs was measured and the head's curvature at f = 0 vanishes."""
    if wanted is None or head == "identity":
        return []
    with torch.no_grad():
        logits = functional_call(net, w0, (x[: wanted.probe_points],)).to(torch.float64)
    if head_curvature_at_zero(head, logits.shape[1]) > CURVATURE_ZERO:
        return []
    largest = float(logits.abs().max())
    return [
        RunWarning(
            code="head_curvature_zero",
            message=f"the {head} head has zero curvature at f = 0, so the outputs' Hessian loses its φ''(f)·∇f∇fᵀ term "
            f"wherever the logits are small (here |f| ≤ {largest:.3g} at init): ‖H‖ can fall for a reason other "
            f"than width; compare with a linear head or a head with φ''(0) ≠ 0 (swish)",
            values={"head": head, "curvature_at_zero": 0.0, "logits_abs_max_init": largest},
        )
    ]


def head_curvature_at_zero(head: str, outputs: int) -> float:
    """max_{a,b,c} |∂²φ_a/∂f_b∂f_c| at f = 0 ∈ R^O, in float64 (0 for tanh, sigmoid, identity, 2-class softmax)."""
    zero = torch.zeros(outputs, dtype=torch.float64)
    return float(hessian(lambda f: apply_head(head, f.unsqueeze(0)).squeeze(0))(zero).abs().max())


def _finite(value: float) -> float | None:
    """JSON carries no infinity: None for it."""
    return value if math.isfinite(value) else None

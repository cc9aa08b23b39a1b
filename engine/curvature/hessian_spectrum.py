"""Hessian spectra: Hutchinson trace, SLQ density and per-layer block norms, of the model or the loss.

    of = "model"  H_ia = ∇²_w f_a(w; x_i) of the outputs φ(f), for each of the first `points`
                  probe points x_i and each output a
    of = "loss"   H = ∇²L(w) over the training set

For each H (spectral_estimators.py for the estimators and their variance): the trace tr H ± its
standard error from `probes` Rademacher vectors (run together, as many as fit the memory budget); the spectral density (1/p) Σ_j δ(t − λ_j) by
stochastic Lanczos quadrature with `lanczos_steps` steps from each of the same vectors — its
nodes and weights, first four moments (estimates of tr H^r / p), a Gaussian-smoothed density on
`grid` points and a histogram of `bins` bins; and ‖H_ll‖₂ of the diagonal block of each
parameter group l (the weights and bias of one layer), by `lanczos_steps` Lanczos steps on that
block alone. Cost: probes·lanczos_steps + groups·lanczos_steps HVPs per H.

The job's trace is the mean of tr H_ia over the model's (i, a) (standard errors combined as
independent), or tr ∇²L.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ntklab.api_schemas.spec import HessianSpectrumDiagnostics
from ntklab.engine.curvature.flat_parameters import parameter_groups
from ntklab.engine.curvature.linear_operator import LinearOperator
from ntklab.engine.curvature.operators import loss_hessian_operator, model_hessian_operator
from ntklab.engine.curvature.spectral_estimators import spectral_norm, stochastic_lanczos_quadrature
from ntklab.engine.kernels.kernel_cost import MEMORY_BUDGET_BYTES
from ntklab.engine.kernels.per_sample import saved_bytes_per_point
from ntklab.engine.nets.base import TangentNetwork
from ntklab.engine.nets.network import trainable_parameters


@dataclass
class Spectrum:
    """One Hessian's estimates: trace ± trace_se, SLQ nodes[N][k] and weights[N][k], moments [4],
    density {grid, values, sigma}, histogram {edges, mass}, block_norms {group: ‖H_ll‖₂}, hvps."""

    trace: float
    trace_se: float | None
    nodes: list[list[float]]
    weights: list[list[float]]
    moments: list[float]
    density: dict
    histogram: dict
    block_norms: dict[str, float]
    hvps: int


@dataclass
class HessianSpectrum:
    """of "model" | "loss"; spectra[P][O] (model) or [[one]] (loss); trace and trace_se as in the module docstring."""

    of: str
    trace: float
    trace_se: float | None
    spectra: list[list[Spectrum]]
    hvps: int


def hessian_spectrum(
    net: nn.Module,
    spec: HessianSpectrumDiagnostics,
    *,
    x_probe: Tensor,
    x_train: Tensor,
    y_train: Tensor,
    loss: str,
    progress: Callable[[int, int], None] | None = None,
) -> HessianSpectrum:
    """The spectra the spec asks for at the network's current weights (seeded: the same draws at every call).

    progress(done, planned) follows every batch of HVPs; planned is the most they can take, lowered
    to done by the last call.
    """
    groups = parameter_groups(net)
    per_hessian = spec.lanczos_steps * (spec.probes + (len(groups) if spec.block_norms else 0))
    if spec.of == "loss":
        tally = Tally(per_hessian, progress)
        batch = probe_batch(net, x_train, spec.lanczos_steps)
        spectra = [
            [
                _spectrum(
                    lambda names: loss_hessian_operator(net, x_train, y_train, loss, names=names),
                    groups,
                    spec,
                    batch,
                    tally,
                )
            ]
        ]
    else:
        output_dim = net.output_dim if isinstance(net, TangentNetwork) else net(x_probe[:1]).shape[-1]
        points = x_probe[: spec.points]
        tally = Tally(len(points) * output_dim * per_hessian, progress)
        batch = probe_batch(net, x_probe[:1], spec.lanczos_steps)
        spectra = [
            [
                _spectrum(
                    lambda names, x_i=x_i, a=a: model_hessian_operator(net, x_i[None], names=names)[a],
                    groups,
                    spec,
                    batch,
                    tally,
                )
                for a in range(output_dim)
            ]
            for x_i in points
        ]
    tally.finish()
    flat = [s for row in spectra for s in row]
    trace = sum(s.trace for s in flat) / len(flat)
    errors = [s.trace_se for s in flat]
    trace_se = None if None in errors else math.sqrt(sum(e * e for e in errors)) / len(flat)
    return HessianSpectrum(spec.of, trace, trace_se, spectra, sum(s.hvps for s in flat))


def probe_batch(net: nn.Module, x: Tensor, steps: int) -> int:
    """Probes run together within MEMORY_BUDGET_BYTES: each holds its Lanczos basis (steps + 4)·p float64
    and a forward-over-reverse product over the points x, ≈ 3× the bytes their forward saves for backward."""
    p = sum(t.numel() for t in trainable_parameters(net).values())
    per_probe = 8 * p * (steps + 4) + 3 * len(x) * saved_bytes_per_point(net, x, lambda out: out)
    return max(1, MEMORY_BUDGET_BYTES // per_probe)


class Tally:
    """HVPs done of `planned`, reported to progress(done, planned) after every batch of products."""

    def __init__(self, planned: int, progress: Callable[[int, int], None] | None) -> None:
        self.done, self.planned, self.progress = 0, planned, progress

    def watch(self, operator: LinearOperator) -> LinearOperator:
        """The operator, reporting after each block of products."""
        return operator.observed(self._after)

    def _after(self, rows: int) -> None:
        self.done += rows
        if self.progress is not None:
            self.progress(self.done, max(self.planned, self.done))

    def finish(self) -> None:
        """The last report: the plan lowered to what was done (Lanczos runs that stopped early)."""
        if self.progress is not None:
            self.progress(self.done, self.done)


def _spectrum(
    operator_of, groups: dict[str, list[str]], spec: HessianSpectrumDiagnostics, batch: int, tally: Tally
) -> Spectrum:
    """operator_of(names) is the Hessian's operator on the parameters `names` (None: all)."""
    generator = torch.Generator().manual_seed(0)
    full: LinearOperator = operator_of(None)
    quadrature = stochastic_lanczos_quadrature(
        tally.watch(full), probes=spec.probes, steps=spec.lanczos_steps, batch=batch, generator=generator
    )
    grid, values, sigma = quadrature.density(spec.grid, spec.bandwidth)
    edges, mass = quadrature.histogram(spec.bins)
    blocks: dict[str, float] = {}
    hvps = full.products
    if spec.block_norms:
        for group, names in groups.items():
            block = operator_of(names)
            blocks[group] = spectral_norm(
                tally.watch(block), steps=spec.lanczos_steps, tolerance=spec.tolerance, generator=generator
            )
            hvps += block.products
    return Spectrum(
        quadrature.trace(),
        quadrature.trace_standard_error(),
        quadrature.nodes,
        quadrature.weights,
        quadrature.moments(),
        {"grid": grid, "values": values, "sigma": sigma},
        {"edges": edges, "mass": mass},
        blocks,
        hvps,
    )

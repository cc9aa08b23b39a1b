"""Benchmark: Hutchinson trace and SLQ density of the loss Hessian against its dense spectrum.

    .venv/bin/python -m bench.bench_hessian_spectrum [--quick] [--threads N]

The loss Hessian ∇²L of an mse mlp (tanh, one-hot targets of a 2-class Gaussian mixture,
n = 64 points, d = 16, float64) at init. Dense: torch.func.hessian of L (jacfwd over jacrev)
and eigvalsh — the cost the estimators avoid, run while its p×p matrix and vmapped
intermediates fit. Hutchinson: `trace probes` Rademacher vectors, one HVP each. SLQ: 16 probes
× 32 Lanczos steps = 512 HVPs, batched (engine/curvature/spectral_estimators.py). Errors are
against the dense spectrum: the trace's in units of its own standard error, the density's
first four moments (tr H^r / p) as the largest relative error. Median wall time of `repeats`
calls after one warm-up, in this process.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, hessian

from bench.tables import print_head, print_row
from ntklab.api_schemas.spec import model_spec
from ntklab.engine.curvature.flat_parameters import FlatParameters
from ntklab.engine.curvature.operators import loss_hessian_operator
from ntklab.engine.curvature.spectral_estimators import stochastic_lanczos_quadrature
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network

WIDTHS = ([16], [64], [32, 32], [128], [64, 64])
N, D, O = 64, 16, 2
PROBES, STEPS, TRACE_PROBES = 16, 32, 100


def problem(hidden: list[int]):
    net = build_network(model_spec(hidden=hidden, activation="tanh", output_dim=O), (D,), seed=0, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(N, D, dtype=torch.float64, generator=generator)
    y = F.one_hot(torch.randint(0, O, (N,), generator=generator), O).double()
    return net, x, y


def dense_spectrum(net, x, y) -> np.ndarray:
    flat = FlatParameters(net)

    def loss(w):
        out = apply_head(net.head, functional_call(net, flat.unflatten(w), (x,)))
        return 0.5 * (out - y).pow(2).sum() / len(x)

    return torch.linalg.eigvalsh(hessian(loss)(flat.w)).numpy()


def timed(call, repeats: int):
    result = call()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - start)
    return result, statistics.median(seconds)


def estimate(net, x, y, probes: int, steps: int):
    operator = loss_hessian_operator(net, x, y, "mse")
    quadrature = stochastic_lanczos_quadrature(
        operator, probes=probes, steps=steps, batch=probes, generator=torch.Generator().manual_seed(0)
    )
    return quadrature, operator.products


def spectrum_table(args) -> None:
    torch.set_num_threads(args.threads)
    repeats = 1 if args.quick else 3
    print_head(
        f"Hessian spectrum: the loss Hessian of an mse mlp (d={D}, n={N}, O={O}, float64), "
        f"median of {repeats} call(s), {args.threads} thread(s)",
        [
            "network",
            "p",
            "dense hessian + eigvalsh (s)",
            f"Hutchinson {TRACE_PROBES} HVPs (s)",
            "trace error / se",
            f"SLQ {PROBES}×{STEPS} HVPs (s)",
            "× vs dense",
            "moments 1–4 max rel. error",
        ],
    )
    for hidden in WIDTHS:
        net, x, y = problem(hidden)
        p = FlatParameters(net).dim
        eigenvalues, dense_s = timed(lambda: dense_spectrum(net, x, y), repeats)
        (trace, _), trace_s = timed(lambda: estimate(net, x, y, TRACE_PROBES, 1), repeats)
        (slq, hvps), slq_s = timed(lambda: estimate(net, x, y, PROBES, STEPS), repeats)
        exact = [float(np.mean(eigenvalues**r)) for r in range(1, 5)]
        moment_error = max(abs(m / e - 1) for m, e in zip(slq.moments(), exact))
        z = (trace.trace() - float(eigenvalues.sum())) / trace.trace_standard_error()
        print_row(
            f"mlp {hidden}",
            f"{p:,}",
            f"{dense_s:.3f}",
            f"{trace_s:.3f}",
            f"{z:+.1f}",
            f"{slq_s:.3f} ({hvps})",
            f"{dense_s / slq_s:.1f}×",
            f"{moment_error:.2f}",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one timed call per cell instead of three")
    parser.add_argument("--threads", type=int, default=1)
    spectrum_table(parser.parse_args())


if __name__ == "__main__":
    main()

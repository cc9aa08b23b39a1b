"""Benchmark: the infinite-width kernels Θ∞, Σ∞ (workers/engine/infinite_width.py) against n and depth.

    .venv/bin/python -m bench.bench_infinite_width [--quick] [--threads N]

In-process, float64, the median wall time of `repeats` calls after one warm-up. Networks: an
MLP of `depth` relu layers (closed forms), the same with tanh (Gauss–Hermite through Mehler's
series, tolerance 1e-10: the terms K it needed are shown), and a relu CNN on digits-shaped 1×8×8
inputs with global average pooling (P = 64 positions, so n²P² pairs). Beside each, the time of
one finite network's tangent kernel (the engine's `auto` method, float64; MLPs of width 1024,
CNNs of 128 channels) on the same points, for scale.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from api_schemas.spec import ModelSpec
from workers.engine import gauss_hermite
from workers.engine.infinite_width import limit_kernels
from workers.engine.nets import build_network
from workers.engine.ntk import tangent_kernel


def timed(call, repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def networks(quick: bool) -> list[tuple[str, ModelSpec, tuple[int, ...]]]:
    depths = (1, 4) if quick else (1, 2, 4, 8)
    out = []
    for activation in ("relu", "tanh"):
        for depth in depths:
            out.append((f"mlp {activation} ×{depth}", ModelSpec(hidden=[1024] * depth, activation=activation, output_dim=1), (16,)))
    for depth in depths[:2] if quick else depths[:3]:
        out.append((f"cnn relu gap ×{depth}", ModelSpec(kind="cnn", hidden=[128] * depth, activation="relu", output_dim=1,
                                                         input_shape=[1, 8, 8]), (64,)))
    return out


def quadrature_terms(model: ModelSpec, x: torch.Tensor) -> str:
    """The Mehler terms K and rule N the first tanh layer needed (— for closed forms)."""
    if model.activations()[0] != "tanh":
        return "—"
    variance = (x * x).mean(-1) + 1.0
    rule = gauss_hermite.choose_expansion("tanh", variance[:, None], 1e-10)
    return f"K={rule.terms}, N={rule.order}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--threads", type=int, default=1)
    args, _ = parser.parse_known_args()  # make bench passes the same BENCH_ARGS to every bench
    torch.set_num_threads(args.threads)
    repeats = 1 if args.quick else 3
    sizes = (16, 64) if args.quick else (16, 64, 256)
    print(f"\n## Infinite-width kernels Θ∞, Σ∞: median of {repeats} calls, {args.threads} thread(s), float64\n")
    print("| network | n | Θ∞ time (s) | quadrature | one finite K (s): mlp width 1024, cnn 128 channels |")
    print("|---|---|---|---|---|")
    for name, model, shape in networks(args.quick):
        for n in sizes:
            if name.startswith("cnn") and n > 64:
                continue
            x = torch.randn(n, *shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
            seconds = timed(lambda: limit_kernels(model, x), repeats)
            net = build_network(model, shape, seed=0, dtype=torch.float64)
            finite = timed(lambda: tangent_kernel(net, x, of="logits"), repeats)
            print(f"| {name} | {n} | {seconds:.3f} | {quadrature_terms(model, x)} | {finite:.3f} |", flush=True)


if __name__ == "__main__":
    main()

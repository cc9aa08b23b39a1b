"""Benchmark: ntklab against its peers, side by side in one harness.

    .venv-bench/bin/python -m bench.bench_peers [--tables curvature,ntk] [--repeats 5] [--threads 1]

Runs in the bench-only environment `make .venv-bench` builds (torch 2.13.0 CPU plus
nngeometry, curvlinops-for-pytorch, PyHessian and hessian-eigenthings; neural-tangents with
jax 0.4.23 in .venv-jax, run as a subprocess). Each row: the same weights and data for every
implementation, float32, the median of `repeats` interleaved rounds (bench/peers/harness.py),
ntklab's time, each peer's time and peer / ntklab; float64 agreement beside it.

    curvature   the loss Hessian's top-k eigenvalues, Hutchinson trace and SLQ density
                (bench/peers/curvature.py)
    ntk         the tangent kernel (MLP, CNN, ViT block) and the infinite-width CNN kernel
                (bench/peers/ntk.py, bench/peers/infinite_cnn.py)
"""

from __future__ import annotations

import argparse
import os

import torch

from bench.tables import print_head, print_row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="curvature,ntk")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads, and XLA's in the neural-tangents subprocesses (1: XLA_FLAGS "
        "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1); 1 because two, on a shared and "
        "oversubscribed machine, made every implementation about 10× slower and the ratios noise",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tables = args.tables.split(",")
    load = "load average " + " / ".join(f"{v:.1f}" for v in os.getloadavg())
    if "curvature" in tables:
        from bench.peers.curvature import CURVATURE_COLUMNS, curvature_rows

        print_head(
            f"Peers: loss-Hessian curvature, float32, median of {args.repeats} interleaved rounds, "
            f"{args.threads} thread(s), {load} at start",
            CURVATURE_COLUMNS,
        )
        curvature_rows(args.repeats, print_row)
        print(f"\nload average at end: {' / '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if "ntk" in tables:
        from bench.peers.ntk import NTK_COLUMNS, ntk_rows

        print_head(
            f"Peers: tangent kernels, float32, median of {args.repeats} interleaved rounds, "
            f"{args.threads} thread(s), {load} at start",
            NTK_COLUMNS,
        )
        ntk_rows(args.repeats, print_row, args.threads)
        print(f"\nload average at end: {' / '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""Benchmark: the infinite-width kernels Θ∞, Σ∞ (engine/limits/infinite_width.py) against n and depth.

    .venv/bin/python -m bench.bench_infinite_width [--quick] [--threads N] [--nt-python PATH] [--peer-repeats R]

In-process, float64, the median wall time of `repeats` calls after one warm-up. Networks: an
MLP of `depth` relu layers (closed forms), the same with tanh (Gauss–Hermite through Mehler's
series, tolerance 1e-10: the terms K it needed are shown), and a relu CNN on digits-shaped 1×8×8
inputs with global average pooling (P = 64 positions, so n²P² pairs). Beside each, the time of
one finite network's tangent kernel (the engine's `auto` method, float64; MLPs of width 1024,
CNNs of 128 channels) on the same points, for scale.

Then the peer row: the relu CNN 3×conv with global average pooling on n = 64 inputs 1×8×8 against
neural-tangents' stax kernel of the same network (bench/peers_nt_infinite_cnn.py, run by the python
of a bench-only environment with jax 0.4.23 and neural-tangents: --nt-python, default .venv-jax/bin/python, which `make .venv-jax` builds;
the row is skipped with the reason when it cannot run). Interleaved: neural-tangents serves one
call per request after its jit warm-up, each followed by one ntklab call, R times; the medians,
their ratio, the two kernels' largest relative difference, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ntklab.api_schemas.spec import AnyModel, model_spec
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.limits import gauss_hermite
from ntklab.engine.limits.infinite_width import limit_kernels
from ntklab.engine.nets.network import build_network


def timed(call, repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def networks(quick: bool) -> list[tuple[str, AnyModel, tuple[int, ...]]]:
    depths = (1, 4) if quick else (1, 2, 4, 8)
    out = []
    for activation in ("relu", "tanh"):
        for depth in depths:
            out.append(
                (
                    f"mlp {activation} ×{depth}",
                    model_spec(hidden=[1024] * depth, activation=activation, output_dim=1),
                    (16,),
                )
            )
    for depth in depths[:2] if quick else depths[:3]:
        out.append(
            (
                f"cnn relu gap ×{depth}",
                model_spec(kind="cnn", hidden=[128] * depth, activation="relu", output_dim=1, input_shape=[1, 8, 8]),
                (64,),
            )
        )
    return out


def quadrature_terms(model: AnyModel, x: torch.Tensor) -> str:
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
    parser.add_argument("--nt-python", default=".venv-jax/bin/python", help="python of the neural-tangents bench env")
    parser.add_argument("--peer-repeats", type=int, default=5)
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
    peer_row(args.nt_python, args.threads, args.peer_repeats)


PEER_MODEL = model_spec(kind="cnn", hidden=[128] * 3, activation="relu", output_dim=1, input_shape=[1, 8, 8])


def peer_row(nt_python: str, threads: int, repeats: int) -> None:
    """ntklab's Θ∞ of PEER_MODEL on n = 64 points against neural-tangents', interleaved (module docstring)."""
    print(
        f"\n## Infinite-width NTK of a relu CNN 3×conv, GAP, 8×8, n = 64, float64: ntklab vs neural-tangents, "
        f"median of {repeats} interleaved calls, {threads} thread(s)\n"
    )
    if not Path(nt_python).exists():
        print(f"skipped: no neural-tangents bench environment at {nt_python} (see bench/peers_nt_infinite_cnn.py)")
        return
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        np.save(f"{folder}/x.npy", x.numpy())
        command = [
            nt_python,
            str(Path(__file__).with_name("peers_nt_infinite_cnn.py")),
            "--inputs",
            f"{folder}/x.npy",
            "--out",
            f"{folder}/theta.npy",
            "--threads",
            str(threads),
            "--serve",
        ]
        with subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        ) as peer:
            ready = _reply(peer)
            if ready is None:
                print(f"skipped: {nt_python} could not run neural-tangents (jax 0.4.23)")
                return
            ours, theirs = [], []
            limit_kernels(PEER_MODEL, x)  # warm-up
            for _ in range(repeats):
                peer.stdin.write("run\n")
                peer.stdin.flush()
                theirs.append(_reply(peer)["seconds"])
                started = time.perf_counter()
                theta = limit_kernels(PEER_MODEL, x).ntk
                ours.append(time.perf_counter() - started)
            peer.stdin.close()
            peer.wait()
        reference = torch.from_numpy(np.load(f"{folder}/theta.npy"))
    difference = ((theta - reference).abs().max() / reference.abs().max()).item()
    mine, peers = statistics.median(ours), statistics.median(theirs)
    print(
        "| ntklab Θ∞ (s) | neural-tangents (s) | ratio ntklab / nt | max |ΔΘ| / max |Θ| | nt jit warm-up (s) | load average before → after |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {mine:.3f} | {peers:.3f} | {mine / peers:.2f} | {difference:.1e} | {ready['warmup_seconds']:.1f} | "
        f"{load_before[0]:.1f} → {os.getloadavg()[0]:.1f} |",
        flush=True,
    )


def _reply(peer: subprocess.Popen) -> dict | None:
    """The peer's next JSON line (None if it exits first)."""
    for line in peer.stdout:
        if line.startswith("{"):
            return json.loads(line)
    return None


if __name__ == "__main__":
    main()

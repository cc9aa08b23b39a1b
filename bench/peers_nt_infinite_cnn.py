"""neural-tangents' infinite-width NTK of the bench's relu CNN, for bench/bench_infinite_width.py to compare.

    <bench env>/bin/python bench/peers_nt_infinite_cnn.py --inputs x.npy --out theta.npy [--depth 3] [--repeats 1] [--threads 1] [--serve]

Run by a bench-only environment with jax/jaxlib 0.4.23 and neural-tangents (never ntklab's own
dependencies; bench/bench_infinite_width.py --nt-python PATH names that environment's python).
The network is ntklab's model_spec(kind="cnn", hidden=[C]·depth, activation="relu", output_dim=1,
input_shape=[1, H, W]) under its ntk parameterization: `depth` times a 3×3 convolution with zero
("SAME") padding, W_std = 1 and b_std = 1 (weights N(0, 1/fan_in), biases N(0, 1)), then relu;
global average pooling; a dense readout, W_std = b_std = 1. Inputs x [n, H·W] are read as n
one-channel H×W images (NHWC for stax). Float64 (jax_enable_x64).

Prints one JSON line {"seconds": [...], "warmup_seconds": s, "devices": "..."}: the wall time of
each of `repeats` calls of the jitted kernel function after one warm-up call (which compiles),
and writes Θ∞ [n, n] of the last call to --out. With --serve (for interleaved timing) it prints
{"warmup_seconds": s} after the warm-up, then one call and {"seconds": s} per line read from
stdin, and writes --out at end of input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inputs", required=True, help=".npy of x [n, H·W]")
    parser.add_argument("--out", required=True, help=".npy to write Θ∞ [n, n] to")
    parser.add_argument("--side", type=int, default=8, help="H = W")
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="1: XLA's CPU backend on one thread")
    parser.add_argument("--serve", action="store_true", help="one timed call per line of stdin")
    args = parser.parse_args()
    if args.threads == 1:
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

    # neural_tangents' `experimental` package imports TensorFlow (its TF port, unused here and not
    # installed in .venv-jax): an empty module stands in for it, as in bench/peers/nt_worker.py
    sys.modules["neural_tangents.experimental"] = types.ModuleType("neural_tangents.experimental")
    import jax  # noqa: PLC0415 (after XLA_FLAGS)
    import numpy as np  # noqa: PLC0415

    jax.config.update("jax_enable_x64", True)
    from neural_tangents import stax  # noqa: PLC0415

    layers = []
    for _ in range(args.depth):
        layers += [stax.Conv(1, (3, 3), padding="SAME", W_std=1.0, b_std=1.0, parameterization="ntk"), stax.Relu()]
    _, _, kernel_fn = stax.serial(
        *layers, stax.GlobalAvgPool(), stax.Dense(1, W_std=1.0, b_std=1.0, parameterization="ntk")
    )
    kernel_fn = jax.jit(kernel_fn, static_argnames="get")

    x = np.load(args.inputs).astype(np.float64).reshape(-1, args.side, args.side, 1)
    x = jax.numpy.asarray(x)
    started = time.perf_counter()
    theta = kernel_fn(x, None, get="ntk").block_until_ready()
    warmup = time.perf_counter() - started
    if args.serve:
        _reply({"warmup_seconds": warmup})
        for _ in sys.stdin:
            seconds, theta = _timed(kernel_fn, x)
            _reply({"seconds": seconds})
    else:
        seconds = []
        for _ in range(args.repeats):
            elapsed, theta = _timed(kernel_fn, x)
            seconds.append(elapsed)
        _reply({"seconds": seconds, "warmup_seconds": warmup, "devices": str(jax.devices())})
    np.save(args.out, np.asarray(theta, dtype=np.float64))


def _timed(kernel_fn, x):
    started = time.perf_counter()
    theta = kernel_fn(x, None, get="ntk").block_until_ready()
    return time.perf_counter() - started, theta


def _reply(message: dict) -> None:
    print(json.dumps(message), flush=True)


if __name__ == "__main__":
    main()

"""neural-tangents' empirical NTK of a ported network, served to bench/peers/ntk.py over stdin/stdout (run in .venv-jax).

    .venv-jax/bin/python -m bench.peers.nt_worker problem.npz [--threads 1]     (from the repository root)

problem.npz: the arrays of bench/peers/nt_export.py (float64 weights and inputs), rebuilt by
bench/peers/nt_networks.py. The kernel: nt.empirical_ntk_fn(trace_axes=(), vmap_axes=0,
structured derivatives, implementation 3), jitted; float32 copies of the weights and inputs for
timing with JAX's default 32-bit mode, the float64 ones for agreement inside
jax.experimental.enable_x64() only (with x64 on globally, stax.Conv's numpy-float64 normaliser
promotes float32 activations to float64, so the "float32" CNN would run in float64). --threads 1 runs XLA's CPU backend on
one thread (XLA_FLAGS set before JAX is imported), like torch's in the bench process. Commands,
one a line: "time" -> the seconds of one call (block_until_ready); "kernel64 PATH" -> K [n·O, n·O]
float64 saved to PATH (row i·O + a); "quit". Imports neither torch nor ntklab. neural_tangents'
`experimental` package imports TensorFlow (its TF port), which the empirical NTK does not use:
an empty module stands in for it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem", help="the .npz of bench/peers/nt_export.py")
    parser.add_argument("--threads", type=int, default=1, help="1: XLA's CPU backend on one thread")
    args = parser.parse_args()
    if args.threads == 1:
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    sys.modules["neural_tangents.experimental"] = types.ModuleType("neural_tangents.experimental")
    import jax
    import neural_tangents as nt
    from jax.experimental import enable_x64

    from bench.peers.nt_networks import network

    apply_fn, params, x = network(np.load(args.problem))
    ntk_fn = nt.empirical_ntk_fn(
        apply_fn, trace_axes=(), vmap_axes=0, implementation=nt.NtkImplementation.STRUCTURED_DERIVATIVES
    )
    kernel = jax.jit(ntk_fn)
    params32, x32 = _cast((params, x), np.float32)
    kernel(x32, None, params32).block_until_ready()
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "time":
            start = time.perf_counter()
            kernel(x32, None, params32).block_until_ready()
            print(time.perf_counter() - start, flush=True)
        elif command[0] == "kernel64":
            with enable_x64():
                params64, x64 = _cast((params, x), np.float64)
                K = np.asarray(jax.jit(ntk_fn)(x64, None, params64))
            n, O = K.shape[0], K.shape[2]
            np.save(command[1], K.transpose(0, 2, 1, 3).reshape(n * O, n * O))
            print("saved", flush=True)
        else:
            return


def _cast(tree, dtype):
    """Every array of a pytree as a JAX array of dtype."""
    import jax

    return jax.tree_util.tree_map(lambda a: jax.numpy.asarray(a, dtype), tree)


if __name__ == "__main__":
    main()

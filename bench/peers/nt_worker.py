"""neural-tangents' empirical NTK of an MLP, served to bench/peers/ntk.py over stdin/stdout (run in .venv-jax).

    .venv-jax/bin/python bench/peers/nt_worker.py problem.npz

problem.npz: x [n, d] and, per dense layer l, W_l [out, in] (torch layout), b_l [out], c_l and β_l
(z = c·x Wᵀ + β·b: stax.Dense(parameterization="ntk") with W_std = c·√fan_in, b_std = β), and
the hidden activation's name. Structured-derivatives NTK (implementation 3), jitted, float32
for timing (x64 enabled, so float64 inputs stay float64 for agreement). Commands, one a line:
"time" -> the seconds of one call (block_until_ready); "kernel64 PATH" -> K [n·O, n·O] float64
saved to PATH (row i·O + a); "quit". Imports neither torch nor ntklab. neural_tangents'
`experimental` package imports TensorFlow (its TF port), which the empirical NTK does not use:
an empty module stands in for it.
"""

from __future__ import annotations

import sys
import time
import types

import numpy as np


def main(path: str) -> None:
    sys.modules["neural_tangents.experimental"] = types.ModuleType("neural_tangents.experimental")
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import neural_tangents as nt
    from neural_tangents import stax

    problem = np.load(path)
    layers = int(problem["layers"])
    activation = {"tanh": jnp.tanh, "relu": jax.nn.relu}[str(problem["activation"])]
    blocks, params = [], []
    for l in range(layers):
        W, b = problem[f"W{l}"], problem[f"b{l}"]
        fan_in = W.shape[1]
        blocks.append(
            stax.Dense(
                W.shape[0],
                W_std=float(problem[f"c{l}"]) * np.sqrt(fan_in),
                b_std=float(problem[f"beta{l}"]),
                parameterization="ntk",
            )
        )
        params.append((W.T, b))
        if l < layers - 1:
            blocks.append(stax.Elementwise(fn=activation))
            params.append(())
    _, apply_fn, _ = stax.serial(*blocks)
    kernel = jax.jit(
        nt.empirical_ntk_fn(
            apply_fn, trace_axes=(), vmap_axes=0, implementation=nt.NtkImplementation.STRUCTURED_DERIVATIVES
        )
    )
    x = problem["x"]

    def cast(dtype):
        return [tuple(jnp.asarray(t, dtype) for t in layer) for layer in params], jnp.asarray(x, dtype)

    params32, x32 = cast(jnp.float32)
    kernel(x32, None, params32).block_until_ready()
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "time":
            start = time.perf_counter()
            kernel(x32, None, params32).block_until_ready()
            print(time.perf_counter() - start, flush=True)
        elif command[0] == "kernel64":
            params64, x64 = cast(jnp.float64)
            K = np.asarray(kernel(x64, None, params64))
            n, O = K.shape[0], K.shape[2]
            np.save(command[1], K.transpose(0, 2, 1, 3).reshape(n * O, n * O))
            print("saved", flush=True)
        else:
            return


if __name__ == "__main__":
    main(sys.argv[1])

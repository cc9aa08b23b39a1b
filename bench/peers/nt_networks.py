"""The JAX side of the ports: (apply_fn, params, x) for neural-tangents from nt_export.py's arrays (run in .venv-jax).

    sequential  stax.serial of Dense / Conv(padding="SAME") layers, parameterization="ntk" with
                the saved W_std = c·√fan_in and b_std = β, the hidden activation between them
                (stax.Relu, or stax.Elementwise(jnp.tanh)), stax.GlobalAvgPool before the readout
                when pool is "global_avg"; params are the saved weights (already in stax's
                layouts) reshaped to stax's own shapes (a conv bias is [1, 1, 1, out])
    vit         vit_function.vit_logits with jax.numpy and jax.scipy.special.erf; params the
                "param:" arrays, the multipliers closed over as constants (not differentiated)

Arrays stay float64 here (the caller casts). Imports neither torch nor ntklab.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from bench.peers.vit_function import vit_arguments, vit_logits


def network(problem) -> tuple:
    """(apply_fn(params, x) -> logits [n, O], params, x) of a saved problem (an npz mapping)."""
    kind = str(problem["kind"])
    if kind == "sequential":
        return _sequential(problem)
    if kind == "vit":
        return _vit(problem)
    raise ValueError(f"unknown network kind {kind!r}")


def _sequential(problem) -> tuple:
    import jax
    import jax.numpy as jnp
    from neural_tangents import stax

    activation = {"relu": stax.Relu(), "tanh": stax.Elementwise(fn=jnp.tanh)}[str(problem["activation"])]
    layers = int(problem["layers"])
    blocks, weights = [], []
    for l in range(layers):
        if l == layers - 1 and str(problem["pool"]) == "global_avg":
            blocks.append(stax.GlobalAvgPool())
            weights.append(())
        W, b = problem[f"W{l}"], problem[f"b{l}"]
        scales = dict(W_std=float(problem[f"W_std{l}"]), b_std=float(problem[f"b_std{l}"]), parameterization="ntk")
        if str(problem[f"kind{l}"]) == "conv":
            blocks.append(stax.Conv(W.shape[-1], W.shape[:2], padding="SAME", **scales))
        else:
            blocks.append(stax.Dense(W.shape[-1], **scales))
        weights.append((W, b))
        if l < layers - 1:
            blocks.append(activation)
            weights.append(())
    init_fn, apply_fn, _ = stax.serial(*blocks)
    _, template = init_fn(jax.random.PRNGKey(0), problem["x"].shape)
    params = [
        tuple(np.asarray(array).reshape(np.shape(like)) for array, like in zip(saved, shapes, strict=True))
        for saved, shapes in zip(weights, template, strict=True)
    ]
    return apply_fn, params, problem["x"]


def _vit(problem) -> tuple:
    import jax.numpy as jnp
    from jax.scipy.special import erf

    params, scales = vit_arguments(problem)
    apply_fn = partial(vit_logits, scales=scales, xp=jnp, erf=erf, heads=int(problem["heads"]))
    return apply_fn, params, problem["x"]

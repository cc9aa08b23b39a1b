"""Liu, Zhu & Belkin (2020) at small scale: one hidden layer, widths m over a 30–100× range.

Set-up (shared): 16 points of a two-class Gaussian mixture in d = 32 with one-hot targets,
‖x‖²/d ≈ 0.5 (mean_scale = sigma = 0.5), NTK parameterization, no biases — the paper's
f = (1/√m) Σ_i v_i σ(w_iᵀx/√d); an output bias is one width-independent parameter with
gradient 1 that would dominate ‖w* − w₀‖_∞. Slopes are numpy.polyfit on logs of
seed-averaged values.

Why these choices (measured, see docs/diagnostics.md "Theory checks"):
- Hessian at init uses softplus: per neuron the Hessian block has a diagonal term
  v_i σ''(z_i) r² and a cross term σ'(z_i) r (r = ‖x‖/√d); the max over m neurons of
  |v_i σ''(z_i)| grows like √(2 ln m), the Õ of the paper. softplus (|σ''| ≤ 1/4) at
  r² ≈ 0.5 keeps that growth small (slope ≈ −0.47); tanh (|σ''| ≤ 0.77) measures ≈ −0.41.
- Training uses tanh: its zero-mean features keep the initial logits small, so no logit
  starts left of swish's minimum at −1.28, where φ' = 0 and gradient descent is trapped.
"""

import numpy as np
import pytest

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.run import run
from ntklab.engine.torch_threads import torch_threads

pytestmark = pytest.mark.slow

OFF = {
    "weight_change": False,
    "layer_sensitivity": False,
    "linearization_error": False,
    "save_kernels": [],
    "save_weights": False,
}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with torch_threads(1):
        yield


def job(m: int, seed: int, activation: str, head: str, training: dict, diagnostics: dict) -> JobSpec:
    return JobSpec.model_validate(
        {
            "seed": seed,
            "data": {
                "kind": "gaussian_mixture",
                "n_train": 16,
                "input_dim": 32,
                "classes": 2,
                "mean_scale": 0.5,
                "sigma": 0.5,
            },
            "model": {"hidden": [m], "activation": activation, "output_activation": head, "bias": False},
            "training": training,
            "diagnostics": diagnostics,
            "device": "cpu",
        }
    )


def slope(widths, values) -> float:
    return float(np.polyfit(np.log(widths), np.log(values), 1)[0])


def hessian_norms(head: str, widths: list[int], seeds: range) -> list[float]:
    diagnostics = {**OFF, "kernel": None, "hessian": {"probe_points": 2, "iterations": 24}}
    return [
        np.mean(
            [
                run(job(m, seed, "softplus", head, {"max_steps": 0}, diagnostics)).summary["hessian_norm_init"]
                for seed in seeds
            ]
        )
        for m in widths
    ]


HESSIAN_WIDTHS = [100, 300, 1000, 3000]


def test_hessian_norm_at_init_falls_like_one_over_root_width_with_a_linear_head():
    norms = hessian_norms("identity", HESSIAN_WIDTHS, range(3))
    assert -0.6 <= slope(HESSIAN_WIDTHS, norms) <= -0.4, norms


@pytest.mark.parametrize("head", ["swish", "softmax"])
def test_hessian_norm_at_init_does_not_fall_with_a_non_linear_head(head):
    norms = hessian_norms(head, HESSIAN_WIDTHS, range(2))
    assert slope(HESSIAN_WIDTHS, norms) > -0.15, norms


TRAIN_WIDTHS = [100, 300, 1000, 3000, 10000]


@pytest.fixture(scope="module")
def trained() -> dict[str, dict[str, list[float]]]:
    """Per head, seed-averaged delta_k_max, ‖w*−w₀‖₂ and ‖w*−w₀‖_∞ at each width (gd, lr auto, to loss 1e-3)."""
    training = {"optimizer": "gd", "lr": "auto", "target_loss": 1e-3, "max_steps": 4000}
    diagnostics = {**OFF, "weight_change": True, "kernel": {"points": 12}, "hessian": None}
    table = {}
    for head in ("identity", "swish", "softmax"):
        rows = {"delta_k_max": [], "weight_change_l2": [], "weight_change_linf": []}
        for m in TRAIN_WIDTHS:
            summaries = [run(job(m, seed, "tanh", head, training, diagnostics)).summary for seed in range(3)]
            assert all(s["outcome"] == "converged" for s in summaries), (head, m, summaries)
            for name in rows:
                rows[name].append(float(np.mean([s[name] for s in summaries])))
        table[head] = rows
    return table


def test_kernel_change_falls_with_width_for_a_linear_head(trained):
    assert slope(TRAIN_WIDTHS, trained["identity"]["delta_k_max"]) < -0.4, trained["identity"]


@pytest.mark.parametrize("head", ["swish", "softmax"])
def test_kernel_change_stays_large_with_a_non_linear_head(trained, head):
    assert trained[head]["delta_k_max"][-1] >= 10 * trained["identity"]["delta_k_max"][-1], trained


@pytest.mark.parametrize("head", ["identity", "swish", "softmax"])
def test_each_weight_moves_less_with_width_but_the_weight_vector_does_not(trained, head):
    rows = trained[head]
    assert slope(TRAIN_WIDTHS, rows["weight_change_linf"]) < -0.3, rows
    assert abs(slope(TRAIN_WIDTHS, rows["weight_change_l2"])) < 0.1, rows

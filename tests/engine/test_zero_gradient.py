"""A network whose every gradient is zero at w₀ (all-zero inputs, no biases) ends with a clear outcome, results kept.

With x = 0 and bias: false every pre-activation is 0 whatever the weights, so f(w; x) = 0,
the tangent kernel K(w₀) = 0 and every ‖∇_w f_a(w; x_i)‖ = 0. lr = "auto" (n / λ_max(K))
has no value then: the run evaluates w₀ and ends with outcome "zero_kernel"; the
Hessian-to-gradient ratios, undefined at every pair, are None. Before, the first raised
ZeroDivisionError and the second ValueError (max of an empty sequence), losing the run.
"""

from __future__ import annotations

import pytest

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.curvature.hessian import hessian_grad_ratio
from ntklab.engine.run import run
from ntklab.engine.training.loop import auto_lr

ZERO_INPUTS = {"kind": "inline", "x": [[0.0, 0.0]] * 4, "y": [1.0, 0.0, 1.0, 0.0]}


def zero_input_job(**training) -> JobSpec:
    return JobSpec.model_validate(
        {
            "model": {"hidden": [8], "bias": False, "activation": "tanh"},
            "data": ZERO_INPUTS,
            "training": {"max_steps": 5, "target_loss": None} | training,
            "diagnostics": {"kernel": {"points": 3}, "hessian": {"probe_points": 2, "iterations": 4}},
            "device": "cpu",
        }
    )


def test_auto_lr_of_a_zero_kernel_is_none_not_a_division_by_zero():
    assert auto_lr(0.0, 4, head="identity", loss="mse") is None
    assert auto_lr(2.0, 4, head="identity", loss="mse") == 2.0


def test_the_ratio_is_none_when_every_gradient_is_zero():
    assert hessian_grad_ratio([[0.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]) is None
    assert hessian_grad_ratio([[1.0], [3.0]], [[0.0], [0.0]], power=2) is None


def test_lr_auto_on_a_zero_kernel_ends_as_zero_kernel_and_keeps_what_it_measured():
    result = run(zero_input_job())
    summary = result.summary
    assert (summary["outcome"], summary["steps"], summary["lr"], summary["converged"]) == (
        "zero_kernel",
        0,
        None,
        False,
    )
    assert summary["final_loss"] == pytest.approx(0.25), "(1/2n) Σ y² with f = 0"
    assert summary["kernel_lambda_max_init"] == 0.0 and summary["grad_norm_init"] == 0.0
    assert summary["hessian_grad_ratio_init"] is None and summary["hessian_kernel_ratio_init"] is None
    assert result.series["loss"].steps == [0] and result.series["loss"].values == [pytest.approx(0.25)]
    assert {"kernel_init.npy", "weights_init.npz", "hessian.json"} <= set(result.artifacts)


def test_a_run_with_a_given_lr_and_zero_gradients_trains_to_max_steps_with_its_results():
    result = run(zero_input_job(lr=0.1))
    summary = result.summary
    assert (summary["outcome"], summary["steps"], summary["lr"]) == ("max_steps", 5, 0.1)
    assert summary["hessian_grad_ratio_init"] is None and summary["weight_change_l2"] == 0.0
    assert result.series["loss"].steps == [0, 1, 2, 3, 4, 5]
    assert {"kernel_init.npy", "kernel_final.npy", "hessian.json"} <= set(result.artifacts)

"""The warnings of a run (engine/diagnostics/run_warnings.py): each raised by a small spec that earns it, and
the numbers they rest on checked against independent references (dense Jacobians in float64,
closed forms, a scalar minimisation)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from scipy.optimize import minimize_scalar
from torch.func import functional_call, jacrev

from ntklab.api_schemas.spec import HessianDiagnostics, JobSpec, model_spec
from ntklab.engine.curvature.hessian import HessianReport
from ntklab.engine.diagnostics.run_warnings import (
    SWISH_MIN,
    head_cannot_reach_targets,
    head_curvature_at_zero,
    hessian_not_converged,
    kernel_dominated_by_group,
)
from ntklab.engine.kernels.ntk import kernel_trace_by_parameter, tangent_kernel
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network, trainable_parameters
from ntklab.engine.run import run
from ntklab.service.grid import expand_grid
from ntklab.service.presets import PRESETS


def job(model=None, data=None, training=None, diagnostics=None) -> JobSpec:
    """A small, quick job: 12 points in 5 dimensions, a tanh network of width 24."""
    return JobSpec.model_validate(
        {
            "seed": 1,
            "data": {"kind": "gaussian_mixture", "n_train": 12, "input_dim": 5, "classes": 2, **(data or {})},
            "model": {"hidden": [24], "activation": "tanh", "bias": False, **(model or {})},
            "training": {"max_steps": 200, "target_loss": 1e-3, **(training or {})},
            "diagnostics": {
                "kernel": {"points": 4},
                "hessian": None,
                "layer_sensitivity": False,
                "linearization_error": False,
                "save_kernels": [],
                **(diagnostics or {}),
            },
        }
    )


def codes(spec: JobSpec) -> list[str]:
    return [warning.code for warning in run(spec).warnings]


# --------------------------------------------------------------------------- the kernel's trace by tensor


@pytest.mark.parametrize("head", ["identity", "softmax", "tanh"])
def test_kernel_trace_by_parameter_matches_a_dense_jacobian_and_sums_to_the_trace(head):
    spec = model_spec(hidden=[7, 5], activation="tanh", output_dim=3, output_activation=head)
    net = build_network(spec, (4,), seed=3, dtype=torch.float64)
    x = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    params = {name: p.detach() for name, p in trainable_parameters(net).items()}
    jacobian = jacrev(lambda p: apply_head(head, functional_call(net, p, (x,))))(params)
    dense = {name: float(J.pow(2).sum()) for name, J in jacobian.items()}
    traces = kernel_trace_by_parameter(net, x, params)
    assert traces == pytest.approx(dense, rel=1e-12)
    assert sum(traces.values()) == pytest.approx(float(tangent_kernel(net, x).trace()), rel=1e-10)


def test_kernel_trace_is_taken_at_the_weights_given_not_the_current_ones():
    net = build_network(model_spec(hidden=[5], output_dim=1), (3,), seed=0, dtype=torch.float64)
    x = torch.randn(4, 3, dtype=torch.float64)
    w0 = {name: p.detach().clone() for name, p in trainable_parameters(net).items()}
    before = kernel_trace_by_parameter(net, x, w0)
    with torch.no_grad():
        net.readout.weight.mul_(3.0)
    assert kernel_trace_by_parameter(net, x, w0) == pytest.approx(before, rel=1e-12)


# --------------------------------------------------------------------------- kernel_dominated_by_group


def test_a_readout_bias_with_multiplier_one_under_meanfield_carries_the_kernel():
    """The issue's failure, rebuilt: β = 1 on the mean-field readout bias; β = 1/√m (the rule) raises nothing."""
    spec = model_spec(hidden=[512], activation="tanh", output_dim=1, parameterization="meanfield")
    net = build_network(spec, (16,), seed=0, dtype=torch.float64)
    x = torch.randn(32, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    params = {name: p.detach() for name, p in trainable_parameters(net).items()}
    assert kernel_dominated_by_group(kernel_trace_by_parameter(net, x, params)) == []
    net.readout.bias_multiplier = 1.0
    (warning,) = kernel_dominated_by_group(kernel_trace_by_parameter(net, x, params))
    assert warning.code == "kernel_dominated_by_group" and warning.values["group"] == "readout.bias"
    assert warning.values["share"] > 0.9


def test_a_wide_standard_readout_on_two_inputs_carries_the_kernel():
    """Standard parameterization: tr K_readout ≈ m·E[σ²] against tr K_hidden ≈ ‖x‖²·E[σ'²]."""
    spec = job(
        model={"hidden": [1024], "parameterization": "standard"},
        data={"input_dim": 2},
        training={"max_steps": 5, "target_loss": None},
    )
    (warning,) = run(spec).warnings
    assert warning.code == "kernel_dominated_by_group" and warning.values["group"] == "readout.weight"


def test_one_trainable_tensor_is_not_a_dominating_group():
    assert kernel_dominated_by_group({"readout.weight": 3.0}) == []
    assert kernel_dominated_by_group({"a": 0.0, "b": 0.0}) == []
    assert [w.values["group"] for w in kernel_dominated_by_group({"a": 0.05, "b": 0.95})] == ["b"]


# --------------------------------------------------------------------------- target_loss_not_reached


def test_training_that_stops_at_max_steps_above_the_target_says_so():
    (warning,) = run(job(training={"max_steps": 3, "target_loss": 1e-9})).warnings
    assert warning.code == "target_loss_not_reached"
    assert warning.values["outcome"] == "max_steps" and warning.values["steps"] == 3
    assert warning.values["final_loss"] > warning.values["target_loss"] == 1e-9


def test_training_that_stops_at_the_time_budget_above_the_target_says_so():
    spec = job(training={"max_steps": 10**6, "target_loss": 1e-12, "time_budget_s": 0.2})
    (warning,) = run(spec).warnings
    assert warning.code == "target_loss_not_reached" and warning.values["outcome"] == "time_budget"


def test_no_target_no_training_or_a_converged_run_raise_nothing():
    assert codes(job(training={"max_steps": 3, "target_loss": None})) == []
    assert codes(job(training={"max_steps": 0})) == []
    converged = run(job(training={"max_steps": 2000, "target_loss": 1e-2}))
    assert converged.summary["outcome"] == "converged" and converged.warnings == []


# --------------------------------------------------------------------------- head_cannot_reach_targets


def test_a_sigmoid_head_on_signed_targets_cannot_reach_them():
    spec = job(
        model={"output_activation": "sigmoid"},
        data={"targets": "signed"},
        training={"max_steps": 2, "target_loss": None},
    )
    (warning,) = run(spec).warnings
    assert warning.code == "head_cannot_reach_targets"
    assert warning.values["image"] == [0.0, 1.0] and warning.values["targets_min"] == -1.0
    assert warning.values["points_outside"] == 6 and warning.values["points"] == 12  # the class at −1


def test_heads_on_targets_inside_their_image_raise_nothing():
    signed = torch.tensor([[-1.0], [1.0], [0.3]])
    onehot = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert head_cannot_reach_targets("tanh", "mse", signed) == []
    assert head_cannot_reach_targets("identity", "mse", 100 * signed) == []
    assert head_cannot_reach_targets("sigmoid", "mse", onehot) == []
    assert head_cannot_reach_targets("softmax", "mse", onehot) == []
    assert head_cannot_reach_targets("sigmoid", "cross_entropy", signed) == []  # cross-entropy reads the logits


def test_softmax_rows_must_sum_to_one_and_swish_stays_above_its_minimum():
    (warning,) = head_cannot_reach_targets("softmax", "mse", torch.tensor([[0.5, 0.6], [0.5, 0.5]]))
    assert warning.values["points_outside"] == 1
    assert head_cannot_reach_targets("swish", "mse", torch.tensor([[-0.27], [5.0]])) == []
    assert len(head_cannot_reach_targets("swish", "mse", torch.tensor([[-0.29]]))) == 1


def test_swish_minimum_is_the_minimum_of_z_sigmoid_z():
    found = minimize_scalar(
        lambda z: z / (1 + math.exp(-z)), bounds=(-5, 0), method="bounded", options={"xatol": 1e-12}
    )
    assert SWISH_MIN == pytest.approx(found.fun, abs=1e-12)


# --------------------------------------------------------------------------- hessian_not_converged


def test_a_hessian_capped_at_four_lanczos_steps_is_not_certified():
    spec = job(training={"max_steps": 0}, diagnostics={"hessian": {"at": ["init"], "probe_points": 2, "iterations": 4}})
    result = run(spec)
    (warning,) = result.warnings
    assert warning.code == "hessian_not_converged" and warning.values["when"] == "init"
    assert warning.values["values_not_converged"] >= 1 and warning.values["worst_relative_bound"] > 1e-6


def test_a_certified_hessian_raises_nothing():
    spec = job(
        model={"hidden": [3]},
        data={"input_dim": 2},
        training={"max_steps": 0},
        diagnostics={"hessian": {"at": ["init"], "probe_points": 2, "iterations": 64}},
    )
    assert codes(spec) == []  # p = 9 ≤ the cap: the dense path, bounds at rounding level


def test_hessian_bounds_are_compared_relative_to_the_value_they_bound():
    wanted = HessianDiagnostics(probe_points=1, tolerance=1e-6)
    report = HessianReport(
        norm=2.0,
        norm_bound=1e-7,
        norms=[[2.0, 1.0]],
        eigenvalues=[[[2.0], [-1.0]]],
        bounds=[[[1e-7], [5e-6]]],
        grad_norms=[[1.0, 1.0]],
        run_hvps=[[4, 4]],
        methods=[["lanczos", "lanczos"]],
        hvps=8,
    )
    (warning,) = hessian_not_converged({"init": report, "final": None}, wanted)
    assert warning.values["values_not_converged"] == 1 and warning.values["worst_relative_bound"] == pytest.approx(5e-6)
    assert hessian_not_converged({"init": report}, HessianDiagnostics(tolerance=1e-5)) == []
    assert hessian_not_converged({"init": report}, HessianDiagnostics(tolerance=0)) == []  # no tolerance asked for


# --------------------------------------------------------------------------- head_curvature_zero


@pytest.mark.parametrize(
    ("head", "outputs", "curvature"),
    [
        ("tanh", 1, 0.0),
        ("sigmoid", 1, 0.0),
        ("identity", 1, 0.0),
        ("softmax", 2, 0.0),
        ("swish", 1, 0.5),  # d²(z σ(z))/dz² = 2σ'(0) = 1/2
        ("softmax", 3, 2 / 27),  # ∂²p_a/∂f_b∂f_c = 2 p_a p_b p_c for distinct a, b, c, at p = 1/3
    ],
)
def test_head_curvature_at_zero_matches_the_closed_forms(head, outputs, curvature):
    assert head_curvature_at_zero(head, outputs) == pytest.approx(curvature, abs=1e-15)


def test_a_hessian_through_a_tanh_head_warns_and_through_swish_does_not():
    hessian = {"hessian": {"at": ["init"], "probe_points": 2, "iterations": 64}}
    small = {"hidden": [3], "output_activation": "tanh"}
    (warning,) = run(
        job(model=small, data={"input_dim": 2, "targets": "signed"}, training={"max_steps": 0}, diagnostics=hessian)
    ).warnings
    assert warning.code == "head_curvature_zero" and warning.values["head"] == "tanh"
    assert warning.values["logits_abs_max_init"] > 0
    assert (
        codes(
            job(
                model={**small, "output_activation": "swish"},
                data={"input_dim": 2},
                training={"max_steps": 0},
                diagnostics=hessian,
            )
        )
        == []
    )


# --------------------------------------------------------------------------- the paper's presets


PAPER_PRESETS = ["fig1-width", "fig1-time", "fig2-bottleneck", "table1-hessian", "param-check", "lazy-is-not-small"]
"""The presets of the paper's claims: every point trains to its target_loss and certifies its Hessian."""


def preset_warnings(name: str) -> dict[str, list[tuple[str, dict]]]:
    """{grid values: [(code, values)]} of the points of preset `name` at smoke scale that raise a warning."""
    sweep = PRESETS[name].sweep("smoke")
    raised = {}
    for point in expand_grid(sweep.base, sweep.grid):
        warnings = run(point.spec).warnings
        if warnings:
            raised[repr(point.values)] = [(w.code, w.values) for w in warnings]
    return raised


@pytest.mark.slow
@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_the_papers_presets_raise_no_warning_at_smoke_scale(name):
    assert preset_warnings(name) == {}


@pytest.mark.slow
def test_finite_to_infinite_warns_of_the_standard_readout_and_says_so():
    """Beyond the paper: under standard parameterization tr K of the readout grows like m while the hidden
    layer's stays Θ(1), so wide standard points are kernel_dominated_by_group on readout.weight, truthfully;
    ntk points raise nothing. The preset's claim says so, and docs/diagnostics.md; no other preset's does."""
    sweep = PRESETS["finite-to-infinite"].sweep("smoke")
    points = {repr(point.values): point.values for point in expand_grid(sweep.base, sweep.grid)}
    raised = preset_warnings("finite-to-infinite")
    for key, warnings in raised.items():
        assert points[key]["model.parameterization"] == "standard"
        assert [(code, values["group"]) for code, values in warnings] == [
            ("kernel_dominated_by_group", "readout.weight")
        ]
    widest = max(
        points.values(), key=lambda values: (values["model.parameterization"] == "standard", values["model.hidden.0"])
    )
    assert raised[repr(widest)][0][1]["share"] > 0.99
    says_so = {name for name, preset in PRESETS.items() if "kernel_dominated_by_group" in preset.claim}
    assert says_so == {"finite-to-infinite"}
    docs = (Path(__file__).parents[2] / "docs" / "diagnostics.md").read_text()
    assert any(
        "`finite-to-infinite`" in paragraph and "`kernel_dominated_by_group`" in paragraph
        for paragraph in docs.split("\n\n")
    )

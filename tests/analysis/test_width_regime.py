"""A fit over widths in standard parameterization at a fixed lr says why ΔK need not fall (analysis/width_regime.py)."""

from __future__ import annotations

import pytest

from ntklab.analysis.sweep_table import SweepRow, fit_results
from ntklab.analysis.width_regime import STANDARD_FIXED_LR, is_width_path
from ntklab.api_schemas.sweeps import FitSpec

BY_PARAMETERIZATION = FitSpec(y="delta_k_max", x="model.hidden.0", group_by=["model.parameterization"])


def row(job_id: str, width: int, parameterization: str, lr: float | str, status: str = "succeeded") -> SweepRow:
    spec = {"model": {"kind": "mlp", "hidden": [width], "parameterization": parameterization}, "training": {"lr": lr}}
    return SweepRow(job_id, status, {}, spec, {"delta_k_max": 1.0 / width})


def codes(fit) -> list[str]:
    return [warning.code for warning in fit.warnings]


def test_standard_at_a_fixed_lr_is_flagged_and_ntk_is_not():
    rows = [row(f"{p}{m}", m, p, 0.5) for p in ("ntk", "standard") for m in (10, 100, 1000)]
    fits = {fit.group["model.parameterization"]: fit for fit in fit_results(rows, BY_PARAMETERIZATION)}
    assert codes(fits["ntk"]) == []
    (warning,) = fits["standard"].warnings
    assert warning.code == STANDARD_FIXED_LR
    assert warning.values == {
        "points": 3,
        "of": 3,
        "job_ids": ["standard10", "standard100", "standard1000"],
        "x": "model.hidden.0",
        "lr": [0.5],
    }
    assert warning.message.startswith(
        "3 of 3 points: this fit compares widths (model.hidden.0) in standard "
        "parameterization at a fixed training.lr = 0.5"
    )
    assert "NTK parameterization" in warning.message and "effective step that grows with width" in warning.message


def test_a_mixed_group_flags_only_its_standard_points():
    rows = [
        row("a", 10, "standard", 0.1),
        row("b", 100, "standard", 0.1),
        row("c", 10, "ntk", 0.1),
        row("d", 100, "ntk", 0.1),
    ]
    (fit,) = fit_results(rows, FitSpec(y="delta_k_max", x="model.hidden.0"))
    (warning,) = fit.warnings
    assert warning.values["job_ids"] == ["a", "b"] and warning.message.startswith("2 of 4 points")


@pytest.mark.parametrize(
    "rows",
    [
        [row("a", 10, "standard", "auto"), row("b", 100, "standard", "auto")],  # lr scaled to the kernel
        [row("a", 10, "standard", 1.0), row("b", 100, "standard", 0.1)],  # an lr that moves with width
        [row("a", 10, "standard", 0.1), row("b", 10, "standard", 0.1)],  # one width: nothing compared
        [row("a", 10, "standard", 0.1), row("b", 100, "standard", 0.1, "failed")],  # one width fitted
    ],
    ids=["auto", "lr-with-width", "one-width", "one-fitted"],
)
def test_no_warning_where_widths_are_not_compared_at_one_lr(rows):
    (fit,) = fit_results(rows, FitSpec(y="delta_k_max", x="model.hidden.0"))
    assert codes(fit) == []


def test_a_fit_of_a_value_at_init_is_not_flagged():
    rows = [row("a", 10, "standard", 0.1), row("b", 100, "standard", 0.1)]
    for r in rows:
        r.summary["hessian_norm_init"] = 1.0
    (fit,) = fit_results(rows, FitSpec(y="hessian_norm_init", x="model.hidden.0"))
    assert codes(fit) == []
    (fit,) = fit_results(rows, FitSpec(y="weight_change_l2", x="model.hidden.0"))
    assert codes(fit) == [STANDARD_FIXED_LR]


def test_a_fit_over_something_else_than_width_is_not_flagged():
    rows = [row("a", 10, "standard", 0.1), row("b", 100, "standard", 0.1)]
    for job_id, n in zip("ab", (16, 64)):
        next(r for r in rows if r.job_id == job_id).spec["data"] = {"n_train": n}
    (fit,) = fit_results(rows, FitSpec(y="delta_k_max", x="data.n_train"))
    assert codes(fit) == []


@pytest.mark.parametrize(
    "path, width",
    [
        ("model.hidden.0", True),
        ("model.hidden.2", True),
        ("model.hidden", True),
        ("model.layers.0.width", True),
        ("model.layers.1.layers.0.width", True),
        ("model.layers.0.kernel_size", False),
        ("data.n_train", False),
        ("model.output_dim", False),
        ("training.lr", False),
    ],
)
def test_width_paths(path, width):
    assert is_width_path(path) is width

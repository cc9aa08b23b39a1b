"""A sweep's table and fits: rows from jobs, one power-law fit per group, and the fits' wire form."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from ntklab.analysis.sweep_table import (
    SweepRow,
    derive_status,
    describe,
    fit_groups,
    fit_results,
    get_path,
    table,
    table_paths,
)
from ntklab.api_schemas.sweeps import FitSpec

WIDTHS = (30, 300, 3000)
SLOPES = {"identity": -0.5, "swish": 0.0}
FIT = FitSpec(y="delta_k_max", x="model.hidden.0", group_by=["model.output_activation"])


def _rows() -> list[SweepRow]:
    """y = 2·width^slope·(0.9 or 1.1) for seeds 0 and 1: the seed mean is exactly 2·width^slope."""
    rows = []
    for head, slope in SLOPES.items():
        for width in WIDTHS:
            for seed in (0, 1):
                value = 2.0 * width**slope * (1.1 if seed else 0.9)
                spec = {"model": {"hidden": [width], "output_activation": head}, "seed": seed}
                rows.append(
                    SweepRow(f"{head}-{width}-{seed}", "succeeded", {"seed": seed}, spec, {"delta_k_max": value})
                )
    failed = {"model": {"hidden": [30000], "output_activation": "identity"}}
    rows.append(SweepRow("failed", "failed", {}, failed, {}))
    return rows


def test_one_fit_per_group_with_seeds_averaged_and_failed_jobs_ignored():
    fits = fit_groups(_rows(), FIT)
    by_head = {f.group["model.output_activation"]: f.result for f in fits}
    assert by_head["identity"].slope == pytest.approx(-0.5)
    assert by_head["swish"].slope == pytest.approx(0.0, abs=1e-12)
    assert [p.runs for p in by_head["identity"].points] == [2, 2, 2]
    assert by_head["identity"].points[0].y_mean == pytest.approx(2.0 * 30**-0.5)
    assert "delta_k_max ∝ x^-0.50" in describe(fits[0])


def test_wire_fits_carry_the_closed_form_slope_intercept_points_and_verdict():
    results = fit_results(_rows(), FIT)
    assert [r.group for r in results] == [{"model.output_activation": head} for head in sorted(SLOPES)]
    for result in results:
        slope = SLOPES[result.group["model.output_activation"]]
        assert (result.x, result.y, result.group_by) == (FIT.x, FIT.y, FIT.group_by)
        assert result.slope == pytest.approx(slope, abs=1e-12)
        assert result.slope_low == pytest.approx(slope, abs=1e-9) and result.slope_high == pytest.approx(
            slope, abs=1e-9
        )
        assert np.exp(result.intercept) == pytest.approx(2.0)
        means = [2.0 * width**slope for width in WIDTHS]
        # sample std (ddof 1) of {0.9·m, 1.1·m} is 0.2·m/√2
        assert [(p.x, p.runs) for p in result.points] == [(float(width), 2) for width in WIDTHS]
        np.testing.assert_allclose([p.y_mean for p in result.points], means, rtol=1e-12)
        np.testing.assert_allclose([p.y_std for p in result.points], [0.2 * m / np.sqrt(2) for m in means], rtol=1e-12)
    assert results[0].verdict == "linear head: delta_k_max ∝ x^-0.50 ± 0.00 (R² 1.00, 3 points)"
    assert [(r.group_label, r.x_label, r.y_label) for r in results] == [
        ("linear head", "width m", "ΔK"),
        ("swish head", "width m", "ΔK"),
    ]
    assert [r.theory_slope for r in results] == [None, None]  # the fit spec states no theory


def test_each_group_carries_the_theory_slope_its_fit_spec_states_and_none_where_it_states_none():
    fit = FIT.model_copy(update={"theory": {"linear head": -0.5, "softmax head": 0.0}})
    slopes = {r.group_label: r.theory_slope for r in fit_results(_rows(), fit)}
    assert slopes == {"linear head": -0.5, "swish head": None}
    ungrouped = FitSpec(y="delta_k_max", x="model.hidden.0", theory={"all": -1.0})
    (result,) = fit_results(_rows(), ungrouped)
    assert (result.group_label, result.theory_slope) == ("all", -1.0)
    assert result.verdict.startswith("delta_k_max ∝ x^"), "an ungrouped verdict does not start with 'all:'"


def test_a_bottlenecks_width_is_labelled_m_b_and_an_ordinary_second_layer_is_not():
    def rows(hidden_of):
        return [
            SweepRow(str(b), "succeeded", {}, {"model": {"hidden": hidden_of(b)}}, {"delta_k_max": 1.0 / b})
            for b in (3, 10, 30)
        ]

    fit = FitSpec(y="delta_k_max", x="model.hidden.1")
    assert fit_results(rows(lambda b: [200, b, 200]), fit)[0].x_label == "bottleneck width m_b"
    assert fit_results(rows(lambda b: [b, b]), fit)[0].x_label == "width of hidden layer 2"


def test_a_group_with_one_width_has_no_fit_and_says_so():
    rows = [row for row in _rows() if row.spec["model"]["hidden"][0] == 30]
    (result, _) = fit_results(rows, FIT)
    assert result.slope is None and result.intercept is None and result.points == []
    assert result.verdict == "linear head: too few points to fit delta_k_max"


def test_get_path_follows_keys_and_list_indices_and_returns_none_past_the_end():
    spec = {"model": {"hidden": [64, 128]}}
    assert get_path(spec, "model.hidden.1") == 128
    assert get_path(spec, "model.hidden.2") is None and get_path(spec, "model.depth") is None


def test_rows_show_the_grid_paths_split_and_every_fits_axes():
    spec = {
        "grid": {"model.hidden.0,model.hidden.1": [[8, 8]], "seed": [0]},
        "fits": [{"y": "delta_k_max", "x": "model.hidden.0", "group_by": ["model.activation"]}],
    }
    assert table_paths(spec) == ["model.hidden.0", "model.hidden.1", "seed", "model.activation"]
    job = SimpleNamespace(
        id="job_1",
        status="succeeded",
        summary=None,
        spec={"model": {"hidden": [8, 8], "activation": "tanh"}, "seed": 0},
    )
    (row,) = table(spec, [job])
    assert row.values == {"model.hidden.0": 8, "model.hidden.1": 8, "seed": 0, "model.activation": "tanh"}
    assert row.summary == {}


@pytest.mark.parametrize(
    ("counts", "cancel", "status"),
    [
        ({"queued": 3}, False, "queued"),
        ({"queued": 1, "succeeded": 2}, False, "running"),
        ({"running": 1, "succeeded": 2}, False, "running"),
        ({"succeeded": 3}, False, "succeeded"),
        ({"succeeded": 1, "cancelled": 2}, True, "cancelled"),
        ({"cancelled": 3}, False, "cancelled"),
        ({"succeeded": 1, "failed": 2}, False, "partial"),
        ({"failed": 3}, False, "failed"),
    ],
)
def test_status_is_derived_from_the_job_counts(counts, cancel, status):
    assert derive_status(Counter(counts), cancel) == status

import numpy as np
import pytest

from api_schemas.sweeps import FitSpec
from service.sweep_analysis import SweepRow, describe, fit_groups
from service.sweep_plot import render_fits


def _rows():
    rows = []
    for head, slope in (("identity", -0.5), ("swish", 0.0)):
        for width in (30, 300, 3000):
            for seed in (0, 1):
                value = 2.0 * width**slope * (1.1 if seed else 0.9)
                spec = {"model": {"hidden": [width], "output_activation": head}, "seed": seed}
                rows.append(SweepRow(f"{head}-{width}-{seed}", "succeeded", {"seed": seed}, spec,
                                     {"delta_k_max": value}))
    failed = {"model": {"hidden": [30000], "output_activation": "identity"}}
    rows.append(SweepRow("failed", "failed", {}, failed, {}))
    return rows


def test_one_fit_per_group_with_seeds_averaged_and_failed_jobs_ignored():
    fits = fit_groups(_rows(), FitSpec(y="delta_k_max", x="model.hidden.0", group_by=["model.output_activation"]))
    by_head = {f.group["model.output_activation"]: f.result for f in fits}
    assert by_head["identity"].slope == pytest.approx(-0.5)
    assert by_head["swish"].slope == pytest.approx(0.0, abs=1e-12)
    assert [p.runs for p in by_head["identity"].points] == [2, 2, 2]
    assert by_head["identity"].points[0].y_mean == pytest.approx(2.0 * 30**-0.5)
    assert "delta_k_max ∝ x^-0.50" in describe(fits[0])


def test_plot_renders_png_and_svg():
    fits = fit_groups(_rows(), FitSpec(y="delta_k_max", x="model.hidden.0", group_by=["model.output_activation"]))
    png = render_fits(fits, x="model.hidden.0", y="delta_k_max", fmt="png")
    svg = render_fits(fits, x="model.hidden.0", y="delta_k_max", fmt="svg")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert b"<svg" in svg[:400]

"""The one drawing of a sweep's fits: points ± std and the line e^intercept·x^slope of each FitResult, as given."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from analysis.fit_figure import fits_figure
from analysis.sweep_plot import render_fits
from api_schemas.sweeps import FitPoint, FitResult


def _fit(group: str, slope: float, intercept: float, points: list[tuple[float, float, float]]) -> FitResult:
    return FitResult(
        y="delta_k_max", x="model.hidden.0", group_by=["model.output_activation"], group={"model.output_activation": group},
        slope=slope, slope_low=slope - 0.1, slope_high=slope + 0.1, intercept=intercept, r_squared=0.9,
        points=[FitPoint(x=x, y_mean=mean, y_std=std, runs=2) for x, mean, std in points],
        verdict=f"output_activation={group}: delta_k_max ∝ x^{slope:+.2f} ± 0.10 (R² 0.90, {len(points)} points)",
    )


# Deliberately not on the fitted lines: the figure must draw the points and the line it is given.
IDENTITY = _fit("identity", -0.37, 1.3, [(20.0, 0.9, 0.1), (200.0, 0.5, 0.05), (2000.0, 0.11, 0.02)])
SWISH = _fit("swish", 0.21, -0.4, [(50.0, 1.4, 0.2), (5000.0, 1.9, 0.3)])
TOO_FEW = FitResult(y="delta_k_max", x="model.hidden.0", group_by=["model.output_activation"],
                    group={"model.output_activation": "relu"}, slope=None, slope_low=None, slope_high=None,
                    intercept=None, r_squared=None, points=[], verdict="output_activation=relu: too few points")


def drawn(axes) -> dict[str, dict[str, np.ndarray]]:
    """Per legend label: the fitted line (x, y) and the error-bar points (x, mean, std) drawn in its colour."""
    lines = {line.get_label(): line for line in axes.lines if not line.get_label().startswith("_")}
    result = {}
    for label, line in lines.items():
        (container,) = [c for c in axes.containers if c.lines[0].get_color() == line.get_color()]
        data, _, (bars,) = container.lines
        low, high = np.array([segment[:, 1] for segment in bars.get_segments()]).T
        result[label] = {"line": line.get_xydata(), "points": data.get_xydata(), "std": (high - low) / 2}
    return result


def test_each_fit_is_drawn_as_given_points_with_error_bars_and_its_line_labelled_with_its_verdict():
    figure = fits_figure([IDENTITY, SWISH, TOO_FEW], x="model.hidden.0", y="delta_k_max", title="width")
    (axes,) = figure.axes
    shown = drawn(axes)
    assert sorted(shown) == sorted([IDENTITY.verdict, SWISH.verdict])  # the unfitted group draws nothing
    for fit in (IDENTITY, SWISH):
        line, points = shown[fit.verdict]["line"], shown[fit.verdict]["points"]
        slope, intercept = np.polyfit(np.log(line[:, 0]), np.log(line[:, 1]), 1)
        assert slope == pytest.approx(fit.slope, abs=1e-12) and intercept == pytest.approx(fit.intercept, abs=1e-12)
        assert line[0, 0] == pytest.approx(fit.points[0].x) and line[-1, 0] == pytest.approx(fit.points[-1].x)
        np.testing.assert_allclose(points, [(p.x, p.y_mean) for p in fit.points])
        np.testing.assert_allclose(shown[fit.verdict]["std"], [p.y_std for p in fit.points])
    assert (axes.get_xscale(), axes.get_yscale()) == ("log", "log")
    assert (axes.get_xlabel(), axes.get_ylabel(), axes.get_title()) == ("model.hidden.0", "delta_k_max", "width")


def test_service_rendering_is_that_figure_as_png_or_svg():
    png = render_fits([IDENTITY, SWISH], x="model.hidden.0", y="delta_k_max", fmt="png")
    svg = render_fits([IDENTITY, SWISH], x="model.hidden.0", y="delta_k_max", fmt="svg")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert b"<svg" in svg[:400]
    assert render_fits([], x="model.hidden.0", y="delta_k_max")[:8] == b"\x89PNG\r\n\x1a\n"  # no fits yet: empty axes


def test_drawing_needs_neither_scipy_nor_pyplot_and_importing_it_loads_no_matplotlib():
    code = (
        "import io, sys\n"
        "from analysis.fit_figure import fits_figure\n"
        "from api_schemas.sweeps import FitResult\n"
        "assert 'matplotlib' not in sys.modules\n"
        f"fit = FitResult.model_validate_json({IDENTITY.model_dump_json()!r})\n"
        "fits_figure([fit], x='x', y='y').savefig(io.BytesIO(), format='png')\n"
        "print(sorted(m for m in ('scipy', 'analysis.fits', 'matplotlib.pyplot', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

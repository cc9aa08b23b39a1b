"""The one drawing of a sweep's fits: points ± std, the line e^intercept·x^slope and the theory line of each
FitResult, as given; axes, legend and title in the paper's symbols; one panel per y."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ntklab.analysis.fit_figure import chosen_fits, fits_figure
from ntklab.analysis.sweep_plot import render_fits
from ntklab.api_schemas.sweeps import FitPoint, FitResult, FitSpec


def _fit(
    group: str,
    slope: float,
    intercept: float,
    points: list[tuple[float, float, float]],
    *,
    theory: float | None = None,
    y: str = "delta_k_max",
    labelled: bool = True,
) -> FitResult:
    group_by = ["model.output_activation"] if group else []
    return FitResult(
        y=y,
        x="model.hidden.0",
        group_by=group_by,
        group={"model.output_activation": group} if group else {},
        slope=slope,
        slope_low=slope - 0.1,
        slope_high=slope + 0.1,
        intercept=intercept,
        r_squared=0.9,
        points=[FitPoint(x=x, y_mean=mean, y_std=std, runs=2) for x, mean, std in points],
        verdict=f"{group}: {y} ∝ x^{slope:+.2f}",
        theory_slope=theory,
        # an older service's fit has no labels: the figure falls back on the label table
        **(
            {
                "group_label": "linear head" if group == "identity" else f"{group} head",
                "x_label": "width m",
                "y_label": "ΔK",
            }
            if labelled
            else {}
        ),
    )


# Deliberately not on the fitted lines: the figure must draw the points and the line it is given.
IDENTITY = _fit("identity", -0.37, 1.3, [(20.0, 0.9, 0.1), (200.0, 0.5, 0.05), (2000.0, 0.11, 0.02)], theory=-0.5)
SWISH = _fit("swish", 0.21, -0.4, [(50.0, 1.4, 0.2), (5000.0, 1.9, 0.3)])
TOO_FEW = FitResult(
    y="delta_k_max",
    x="model.hidden.0",
    group_by=["model.output_activation"],
    group={"model.output_activation": "relu"},
    slope=None,
    slope_low=None,
    slope_high=None,
    intercept=None,
    r_squared=None,
    points=[],
    verdict="relu head: too few points",
)


def drawn(axes) -> dict[str, dict[str, np.ndarray]]:
    """Per legend label of a solid line: that line (x, y) and the error-bar points (x, mean, std) in its colour."""
    lines = {
        line.get_label(): line
        for line in axes.lines
        if not line.get_label().startswith("_") and line.get_linestyle() == "-"
    }
    result = {}
    for label, line in lines.items():
        (container,) = [c for c in axes.containers if c.lines[0].get_color() == line.get_color()]
        data, _, (bars,) = container.lines
        low, high = np.array([segment[:, 1] for segment in bars.get_segments()]).T
        result[label] = {"line": line.get_xydata(), "points": data.get_xydata(), "std": (high - low) / 2}
    return result


def dashed(axes) -> dict[str, np.ndarray]:
    return {line.get_label(): line.get_xydata() for line in axes.lines if line.get_linestyle() == "--"}


def legend_texts(axes) -> list[str]:
    return [text.get_text() for text in axes.get_legend().get_texts()]


def test_each_fit_is_drawn_as_given_points_with_error_bars_and_its_line_named_by_its_group():
    figure = fits_figure([IDENTITY, SWISH, TOO_FEW], title="ΔK against width")
    (axes,) = figure.axes
    shown = drawn(axes)
    names = {"linear head: slope -0.37 ± 0.10, R² 0.90": IDENTITY, "swish head: slope +0.21 ± 0.10, R² 0.90": SWISH}
    assert sorted(shown) == sorted(names)  # the unfitted group draws nothing
    for label, fit in names.items():
        line, points = shown[label]["line"], shown[label]["points"]
        slope, intercept = np.polyfit(np.log(line[:, 0]), np.log(line[:, 1]), 1)
        assert slope == pytest.approx(fit.slope, abs=1e-12) and intercept == pytest.approx(fit.intercept, abs=1e-12)
        assert line[0, 0] == pytest.approx(fit.points[0].x) and line[-1, 0] == pytest.approx(fit.points[-1].x)
        np.testing.assert_allclose(points, [(p.x, p.y_mean) for p in fit.points])
        np.testing.assert_allclose(shown[label]["std"], [p.y_std for p in fit.points])
    assert (axes.get_xscale(), axes.get_yscale()) == ("log", "log")
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("width m", "ΔK")
    assert figure.get_suptitle() == "ΔK against width"
    assert not any(text.startswith(("output_activation", "name=", "all")) for text in legend_texts(axes))


def test_the_theory_slope_is_a_dashed_line_in_the_fits_colour_through_its_line_at_the_centre():
    (axes,) = fits_figure([IDENTITY, SWISH]).axes
    ((label, line),) = dashed(axes).items()  # SWISH states no theory: no second dashed line
    assert label == "linear head: theory slope -0.50"
    slope = np.polyfit(np.log(line[:, 0]), np.log(line[:, 1]), 1)[0]
    assert slope == pytest.approx(-0.5, abs=1e-12)
    centre = np.exp(np.mean(np.log([p.x for p in IDENTITY.points])))
    fitted_at_centre = np.exp(IDENTITY.intercept) * centre**IDENTITY.slope
    assert np.exp(np.interp(np.log(centre), np.log(line[:, 0]), np.log(line[:, 1]))) == pytest.approx(fitted_at_centre)
    (theory_line,) = [ln for ln in axes.lines if ln.get_linestyle() == "--"]
    (fit_line,) = [ln for ln in axes.lines if ln.get_label().startswith("linear head: slope")]
    assert theory_line.get_color() == fit_line.get_color()
    assert label in legend_texts(axes)


def test_several_ys_are_one_panel_each_and_an_ungrouped_fit_is_named_by_its_y():
    l2 = _fit("", 0.01, 1.6, [(30.0, 5.0, 0.3), (3000.0, 5.2, 0.3)], theory=0.0, y="weight_change_l2", labelled=False)
    linf = _fit(
        "", -0.4, 1.0, [(30.0, 1.7, 0.1), (3000.0, 0.25, 0.02)], theory=-0.5, y="weight_change_linf", labelled=False
    )
    figure = fits_figure([l2, linf], title="lazy-is-not-small (cpu)")
    assert len(figure.axes) == 2
    assert [axes.get_title() for axes in figure.axes] == ["‖w* − w₀‖₂", "‖w* − w₀‖∞"]
    assert [axes.get_ylabel() for axes in figure.axes] == ["‖w* − w₀‖₂", "‖w* − w₀‖∞"]
    assert {axes.get_xlabel() for axes in figure.axes} == {"width m"}
    assert legend_texts(figure.axes[1]) == ["‖w* − w₀‖∞: slope -0.40 ± 0.10, R² 0.90", "‖w* − w₀‖∞: theory slope -0.50"]
    assert figure.get_suptitle() == "lazy-is-not-small (cpu)"


def test_every_figure_has_a_title_even_when_none_is_given_and_there_are_no_fits():
    assert fits_figure([IDENTITY]).get_suptitle() == "ΔK against width m"
    empty = fits_figure([], x="model.hidden.1", y="hessian_norm_init")
    assert empty.get_suptitle() == "‖H‖ at init against width of hidden layer 2"
    assert (empty.axes[0].get_xlabel(), empty.axes[0].get_ylabel()) == ("width of hidden layer 2", "‖H‖ at init")


def test_chosen_fits_takes_every_y_of_the_first_x_or_the_pair_asked_for():
    specs = [
        FitSpec(y="hessian_kernel_ratio_init", x="model.hidden.0", group_by=["model.parameterization"]),
        FitSpec(y="hessian_norm_init", x="model.hidden.0", group_by=["model.parameterization"]),
        FitSpec(y="hessian_norm_init", x="model.hidden.0"),
        FitSpec(y="final_loss", x="seed"),
    ]
    assert chosen_fits(specs) == specs[:2]
    assert chosen_fits(specs, y="hessian_norm_init") == [specs[1]]
    assert chosen_fits(specs, x="seed") == [specs[3]]
    assert chosen_fits(specs, x="seed", y="hessian_norm_init") == []


def test_service_rendering_is_that_figure_as_png_or_svg():
    png = render_fits([IDENTITY, SWISH], title="t", fmt="png")
    svg = render_fits([IDENTITY, SWISH], title="t", fmt="svg")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert b"<svg" in svg[:400]
    assert render_fits([], x="model.hidden.0", y="delta_k_max")[:8] == b"\x89PNG\r\n\x1a\n"  # no fits yet: empty axes


def test_drawing_needs_neither_scipy_nor_pyplot_and_importing_it_loads_no_matplotlib():
    code = (
        "import io, sys\n"
        "from ntklab.analysis.fit_figure import fits_figure\n"
        "from ntklab.api_schemas.sweeps import FitResult\n"
        "assert 'matplotlib' not in sys.modules\n"
        f"fit = FitResult.model_validate_json({IDENTITY.model_dump_json()!r})\n"
        "fits_figure([fit], x='x', y='y').savefig(io.BytesIO(), format='png')\n"
        "print(sorted(m for m in ('scipy', 'ntklab.analysis.fits', 'matplotlib.pyplot', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

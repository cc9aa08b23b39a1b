"""A sweep's power-law fits on log–log axes: the one drawing behind the service's plot and the SDK's figure.

Each fit is an `ntklab.api_schemas.sweeps.FitResult`, exactly what GET /v1/sweeps/{id} returns, drawn
as its seed-averaged points (mean ± std over the runs at each x) and its line
log y = intercept + slope·log x, i.e. y = e^intercept · x^slope, over the points' x range; where
the fit carries a theory slope t, a dashed line of slope t in the same colour crosses the fitted
line at the geometric mean of the points' x, so the two slopes can be compared by eye. One panel
per y (`chosen_fits` picks which fits a plot shows), axes and legend in the paper's symbols
(analysis/labels.py), a title over the figure. Nothing here fits (no scipy); matplotlib is
imported when a figure is drawn, not when this module is imported. Titles, axis labels and
legend entries may be the user's text (fit names, grid values) and are drawn as typed: never as
mathtext or TeX, so `$x^$` is a label, not an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from ntklab.analysis.labels import axis_label, group_label
from ntklab.api_schemas.sweeps import FitResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PANEL_SIZE = (6.4, 4.4)
DPI = 110
LINE_POINTS = 50
LEGEND_FONTSIZE = 7
PLAIN_TEXT = {"parse_math": False, "usetex": False}


class FitLike(Protocol):
    x: str
    y: str
    group_by: list[str]


Fit = TypeVar("Fit", bound=FitLike)


def chosen_fits(fits: Sequence[Fit], *, x: str | None = None, y: str | None = None) -> list[Fit]:
    """The fits a sweep's plot shows: those of x (default: the first fit's x) and of y if given, else of every y
    of that x; for each y, the grouping of the first fit of that y. [] when no fit matches."""
    first = next((fit for fit in fits if x in (None, fit.x) and y in (None, fit.y)), None)
    if first is None:
        return []
    grouping: dict[str, list[str]] = {}
    for fit in fits:
        if fit.x == first.x and y in (None, fit.y):
            grouping.setdefault(fit.y, list(fit.group_by))
    return [fit for fit in fits if fit.x == first.x and grouping.get(fit.y) == list(fit.group_by)]


def fits_figure(fits: Sequence[FitResult], *, title: str = "", x: str = "", y: str = "") -> Figure:
    """One log–log panel per y of `fits`: every fitted group's points, line and theory line (groups too small
    to fit are left out). The figure's title is `title`, or "y against x"; x and y name the axes of a figure
    with no fits to take them from."""
    from matplotlib.figure import Figure

    panels = _panels(fits) or {y: []}
    figure = Figure(figsize=(PANEL_SIZE[0] * len(panels), PANEL_SIZE[1]), dpi=DPI, layout="constrained")
    for axes, panel in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels.values()):
        for fit in panel:
            if fit.slope is not None and fit.intercept is not None:
                draw_fit(axes, fit)
        x_label, y_label = _axis_labels(panel, x, y)
        log_log_axes(axes, x=x_label, y=y_label)
        if len(panels) > 1:
            axes.set_title(y_label, **PLAIN_TEXT)
    figure.suptitle(title or default_title(fits, x, y), **PLAIN_TEXT)
    return figure


def default_title(fits: Sequence[FitResult], x: str = "", y: str = "") -> str:
    """ "ΔK against width m", from the fits' labels (or x and y when there are no fits)."""
    panels = _panels(fits)
    if not panels:
        return f"{axis_label(y)} against {axis_label(x)}"
    labels = [_axis_labels(panel, x, y) for panel in panels.values()]
    return f"{' and '.join(y_label for _, y_label in labels)} against {labels[0][0]}"


def draw_fit(axes: Any, fit: FitResult) -> None:
    """The fit's points y_mean ± y_std and its line y = e^intercept · x^slope, in one colour, labelled with its
    group, slope, 95% interval and R²; its theory line dashed beside it when the fit carries a theory slope."""
    xs = np.array([point.x for point in fit.points])
    means = np.array([point.y_mean for point in fit.points])
    stds = np.array([point.y_std for point in fit.points])
    colour = axes.errorbar(xs, means, yerr=stds, fmt="o", capsize=3)[0].get_color()
    grid = np.geomspace(xs.min(), xs.max(), LINE_POINTS)
    axes.plot(grid, np.exp(fit.intercept) * grid**fit.slope, "-", color=colour, label=fit_label(fit))
    if fit.theory_slope is not None:
        centre = float(np.exp(np.log(xs).mean()))
        through = np.exp(fit.intercept) * centre**fit.slope
        axes.plot(
            grid,
            through * (grid / centre) ** fit.theory_slope,
            "--",
            color=colour,
            alpha=0.7,
            label=f"{fit_name(fit)}: theory slope {fit.theory_slope:+.2f}",
        )


def fit_name(fit: FitResult) -> str:
    """The group in words ("linear head"), or y's label for a fit without group_by."""
    label = fit.group_label or group_label(fit.group)
    return (fit.y_label or axis_label(fit.y)) if label == "all" else label


def fit_label(fit: FitResult) -> str:
    """ "linear head: slope -0.49 ± 0.05, R² 0.98" (interval and R² where the fit has them)."""
    spread = "" if fit.slope_high is None else f" ± {fit.slope_high - fit.slope:.2f}"
    r_squared = "" if fit.r_squared is None else f", R² {fit.r_squared:.2f}"
    return f"{fit_name(fit)}: slope {fit.slope:+.2f}{spread}{r_squared}"


def log_log_axes(axes: Any, *, x: str, y: str) -> None:
    """Both axes logarithmic, labelled x and y, a light grid, and a legend when anything is labelled."""
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel(x, **PLAIN_TEXT)
    axes.set_ylabel(y, **PLAIN_TEXT)
    axes.grid(True, which="both", alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        for entry in axes.legend(fontsize=LEGEND_FONTSIZE).get_texts():
            entry.set(**PLAIN_TEXT)


def _panels(fits: Sequence[FitResult]) -> dict[str, list[FitResult]]:
    panels: dict[str, list[FitResult]] = {}
    for fit in fits:
        panels.setdefault(fit.y, []).append(fit)
    return panels


def _axis_labels(panel: Sequence[FitResult], x: str, y: str) -> tuple[str, str]:
    """The panel's (x label, y label): the service's, or the label table's for an older service's fits."""
    if not panel:
        return axis_label(x), axis_label(y)
    fit = panel[0]
    return fit.x_label or axis_label(fit.x), fit.y_label or axis_label(fit.y)

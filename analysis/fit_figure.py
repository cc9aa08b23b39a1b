"""A sweep's power-law fits on log–log axes: the one drawing behind the service's plot and the SDK's figure.

Each fit is an `api_schemas.sweeps.FitResult`, exactly what GET /v1/sweeps/{id} returns, drawn
as its seed-averaged points (mean ± std over the runs at each x) and its line
log y = intercept + slope·log x, i.e. y = e^intercept · x^slope, over the points' x range,
labelled with its verdict. Nothing here fits (no scipy); matplotlib is imported when a
figure is drawn, not when this module is imported. Titles, axis labels and legend entries are
the user's text (fit names, grid values) and are drawn as typed: never as mathtext or TeX, so
`$x^$` is a label, not an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from api_schemas.sweeps import FitResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURE_SIZE = (6.4, 4.4)
DPI = 110
LINE_POINTS = 50
LEGEND_FONTSIZE = 7
PLAIN_TEXT = {"parse_math": False, "usetex": False}


def fits_figure(fits: Sequence[FitResult], *, x: str, y: str, title: str = "") -> Figure:
    """y against x on log–log axes: every fitted group's points and line (groups too small to fit are left out)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=FIGURE_SIZE, dpi=DPI, layout="constrained")
    axes = figure.subplots()
    for fit in fits:
        if fit.slope is not None and fit.intercept is not None:
            draw_fit(axes, fit)
    log_log_axes(axes, x=x, y=y)
    axes.set_title(title, **PLAIN_TEXT)
    return figure


def draw_fit(axes: Any, fit: FitResult) -> None:
    """The fit's points y_mean ± y_std and its line y = e^intercept · x^slope, in one colour, labelled with the verdict."""
    xs = np.array([point.x for point in fit.points])
    means = np.array([point.y_mean for point in fit.points])
    stds = np.array([point.y_std for point in fit.points])
    marker = axes.errorbar(xs, means, yerr=stds, fmt="o", capsize=3)[0]
    grid = np.geomspace(xs.min(), xs.max(), LINE_POINTS)
    axes.plot(grid, np.exp(fit.intercept) * grid**fit.slope, "-", color=marker.get_color(), label=fit.verdict)


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

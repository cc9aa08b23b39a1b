"""A power-law fit drawn on log–log axes, the one way the service's and the SDK's sweep plots draw it.

The caller passes matplotlib Axes; nothing here imports matplotlib.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.engine.fits import PowerLawFit

LINE_POINTS = 50


def draw_power_law(axes: Any, fit: PowerLawFit, label: str, *, error_bars: bool) -> None:
    """The fit's seed-averaged points (± their std with `error_bars`) and its line y = e^intercept · x^slope
    over the points' x range, in one colour."""
    xs = np.array([point.x for point in fit.points])
    means = np.array([point.y_mean for point in fit.points])
    if error_bars:
        stds = np.array([point.y_std for point in fit.points])
        marker = axes.errorbar(xs, means, yerr=stds, fmt="o", capsize=3)[0]
    else:
        marker = axes.plot(xs, means, "o")[0]
    grid = np.geomspace(xs.min(), xs.max(), LINE_POINTS)
    axes.plot(grid, np.exp(fit.intercept) * grid**fit.slope, "-", color=marker.get_color(), label=label)


def log_log_axes(axes: Any, *, x: str, y: str, legend_fontsize: float) -> None:
    """Both axes logarithmic, labelled x and y, a light grid, and a legend when anything is labelled."""
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel(x)
    axes.set_ylabel(y)
    axes.grid(True, which="both", alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=legend_fontsize)

"""Log–log plot of a sweep: seed-averaged points with error bars and each group's fitted line."""

from __future__ import annotations

import io
from typing import Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from service.sweep_analysis import GroupFit, describe  # noqa: E402

MEDIA_TYPES = {"png": "image/png", "svg": "image/svg+xml"}


def render_fits(fits: list[GroupFit], *, x: str, y: str, fmt: Literal["png", "svg"] = "png") -> bytes:
    """Draw every group's points (mean ± std over seeds) and fitted power law on log–log axes."""
    figure, axes = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    try:
        for group_fit in fits:
            result = group_fit.result
            if result is None:
                continue
            xs = np.array([p.x for p in result.points])
            means = np.array([p.y_mean for p in result.points])
            stds = np.array([p.y_std for p in result.points])
            line = axes.errorbar(xs, means, yerr=stds, fmt="o", capsize=3)
            grid = np.geomspace(xs.min(), xs.max(), 50)
            axes.plot(grid, np.exp(result.intercept) * grid**result.slope, "-", color=line[0].get_color(),
                      label=describe(group_fit))
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel(x)
        axes.set_ylabel(y)
        axes.grid(True, which="both", alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=7)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format=fmt)
        return buffer.getvalue()
    finally:
        plt.close(figure)

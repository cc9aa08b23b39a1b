"""Figures for a job (ΔK(t), loss, weight change) and a sweep (log–log with fitted slopes).

matplotlib is imported only when a figure is drawn. Figures are built with the
object-oriented API (no pyplot state), returned, and saved when a path is given; the
format follows the path's suffix (.png, .svg, .pdf).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.engine.fit_figure import draw_power_law, log_log_axes
from workers.engine.fits import PowerLawFit, fit_power_law

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ntklab.resources.jobs import MetricSeries
    from ntklab.resources.sweeps import SweepRow

JOB_PANELS = (
    ("ΔK(t) = ‖K(w_t) − K(w₀)‖_F / ‖K(w₀)‖_F", ("delta_k",)),
    ("training loss", ("loss",)),
    ("weight change ‖w_t − w₀‖", ("weight_change_l2", "weight_change_linf")),
)


def _figure(width: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, 3.6), layout="constrained")


def _save(figure: Figure, path: str | None) -> Figure:
    if path is not None:
        figure.savefig(path)
    return figure


def job_figure(metrics: Mapping[str, MetricSeries], *, title: str = "", path: str | None = None) -> Figure:
    """Three panels against training step (symlog x, log y): ΔK(t), loss, ‖w_t−w₀‖₂ and ‖w_t−w₀‖_∞."""
    figure = _figure(13.0)
    axes = figure.subplots(1, 3)
    for ax, (label, names) in zip(axes, JOB_PANELS):
        for name in names:
            if name in metrics:
                steps, values = metrics[name]
                ax.plot(steps, values, marker=".", label=name)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step")
        ax.set_xscale("symlog", linthresh=1)
        if ax.lines and np.nanmin([np.nanmin(line.get_ydata()) for line in ax.lines]) > 0:
            ax.set_yscale("log")
        if len(ax.lines) > 1:
            ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    figure.suptitle(title)
    return _save(figure, path)


def sweep_fits(
    rows: Sequence[SweepRow], *, x: str, y: str, group_by: Sequence[str]
) -> dict[tuple, PowerLawFit | None]:
    """Per group of succeeded rows: the service's power-law fit of y against x (seeds averaged first)."""
    collected: dict[tuple, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in rows:
        if row.status == "succeeded":
            xs, ys = collected[tuple((path, row.values.get(path)) for path in group_by)]
            xs.append(_number(row.values.get(x)))
            ys.append(_number(row.summary.get(y)))
    return {group: fit_power_law(xs, ys) for group, (xs, ys) in collected.items()}


def _number(value: Any) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)


def sweep_figure(
    rows: Sequence[SweepRow], *, x: str, y: str, group_by: Sequence[str] = (), title: str = "", path: str | None = None
) -> Figure:
    """log–log y against x: seed-averaged points per group and the fitted line, slope in the legend."""
    figure = _figure(6.4)
    ax = figure.subplots()
    for group, fit in sorted(sweep_fits(rows, x=x, y=y, group_by=group_by).items(), key=repr):
        if fit is None:
            continue
        name = ", ".join(f"{path.split('.')[-1]}={value}" for path, value in group) or y
        draw_power_law(ax, fit, f"{name}: slope {fit.slope:+.2f}", error_bars=False)
    log_log_axes(ax, x=x, y=y, legend_fontsize=8)
    ax.set_title(title)
    return _save(figure, path)

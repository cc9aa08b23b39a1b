"""Figures for a job (ΔK(t), loss, weight change) and a sweep (the service's power-law fits on log–log axes).

matplotlib is imported only when a figure is drawn. Figures are built with the
object-oriented API (no pyplot state), returned, and saved when a path is given; the
format follows the path's suffix (.png, .svg, .pdf). A sweep's figure draws the fits the
service returned with the service's own drawing (analysis.fit_figure): no scipy, no re-fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.fit_figure import fits_figure
from api_schemas.sweeps import FitResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ntklab.resources.jobs import MetricSeries

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


def sweep_figure(
    fits: Sequence[FitResult | Mapping[str, Any]],
    *,
    x: str | None = None,
    y: str | None = None,
    title: str = "",
    path: str | None = None,
) -> Figure:
    """The service's fits of y against x, drawn as the service draws them (analysis.fit_figure); nothing is re-fitted.

    x and y default to the first fit's; ValueError, naming the fits there are, when none is of y against x."""
    chosen = fits_of([_fit(fit) for fit in fits], x=x, y=y)
    return _save(fits_figure(chosen, x=chosen[0].x, y=chosen[0].y, title=title), path)


def fits_of(fits: Sequence[FitResult], *, x: str | None, y: str | None) -> list[FitResult]:
    """Every group of the first fit whose x and y match those given (None matches any), as the service's plot picks it."""
    wanted = next(((fit.x, fit.y, fit.group_by) for fit in fits if x in (None, fit.x) and y in (None, fit.y)), None)
    if wanted is None:
        have = ", ".join(dict.fromkeys(f"{fit.y} against {fit.x}" for fit in fits)) or "none"
        raise ValueError(
            f"the sweep has no fit of {y or 'any y'} against {x or 'any x'} (its fits: {have}); "
            "client.sweeps.plot_image(sweep_id, x=..., y=...) has the service fit and draw any pair"
        )
    return [fit for fit in fits if (fit.x, fit.y, fit.group_by) == wanted]


def _fit(fit: FitResult | Mapping[str, Any]) -> FitResult:
    """A fit as the service returned it, model or dict; keys a newer service adds are ignored."""
    if isinstance(fit, FitResult):
        return fit
    return FitResult.model_validate({key: fit[key] for key in FitResult.model_fields if key in fit})

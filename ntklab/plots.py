"""Figures for a job (ΔK(t), loss, weight change) and a sweep (the service's power-law fits on log–log axes).

matplotlib is imported only when a figure is drawn. Figures are built with the
object-oriented API (no pyplot state), returned, and saved when a path is given; the
format follows the path's suffix (.png, .svg, .pdf), and a .png is written with a .pdf and
an .svg of the same figure beside it, for a paper. A job's series are lines (no markers: a
loss recorded at every step is a thousand points), on log axes where they span more than two
decades (`DECADES_SPAN`). A sweep's figure is the service's own
drawing (ntklab.analysis.fit_figure) of the fits the service returned, chosen as the service's plot
chooses them: no scipy, no re-fit. Labels are the paper's symbols (analysis/labels.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ntklab.analysis.fit_figure import PLAIN_TEXT, chosen_fits, fits_figure
from ntklab.analysis.labels import series_label
from ntklab.api_schemas.sweeps import FitResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ntklab.resources.jobs import MetricSeries

JOB_PANELS = (
    ("ΔK(t) = ‖K(w_t) − K(w₀)‖_F / ‖K(w₀)‖_F", "ΔK(t)", ("delta_k", "delta_k_logits")),
    ("training loss", "loss", ("loss",)),
    ("weight change", "‖w_t − w₀‖", ("weight_change_l2", "weight_change_linf")),
)
JOB_SERIES = tuple(name for _, _, names in JOB_PANELS for name in names)
DECADES_SPAN = 100.0
"""An axis is logarithmic when its positive values span more than this ratio max / min."""
VECTOR_FORMATS = (".pdf", ".svg")
"""Written beside a figure saved as .png."""


def _figure(width: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, 3.6), layout="constrained")


def save_figure(figure: Figure, path: str | None) -> Figure:
    """Save to `path` (if given) and, when it is a .png, to the same name as .pdf and .svg."""
    if path is not None:
        figure.savefig(path)
        if Path(path).suffix.lower() == ".png":
            for suffix in VECTOR_FORMATS:
                figure.savefig(Path(path).with_suffix(suffix))
    return figure


def spans_decades(values: Sequence[np.ndarray]) -> bool:
    """Whether the finite positive values among `values` span more than DECADES_SPAN (max / min)."""
    joined = np.concatenate([np.asarray(value, dtype=float).ravel() for value in values]) if values else np.array([])
    positive = joined[np.isfinite(joined) & (joined > 0)]
    return bool(positive.size > 1 and positive.max() > DECADES_SPAN * positive.min())


def job_figure(metrics: Mapping[str, MetricSeries], *, title: str, path: str | None = None) -> Figure:
    """Three panels of lines against training step: ΔK(t) of the outputs φ(f) and, with a non-linear head, of the
    logits f; the loss; ‖w_t−w₀‖₂ and ‖w_t−w₀‖_∞. Every line is named in its panel's legend; an axis is
    logarithmic where its data span decades (`log_axes`)."""
    figure = _figure(13.0)
    for axes, (panel_title, y_label, names) in zip(figure.subplots(1, 3), JOB_PANELS):
        for name in names:
            if name in metrics:
                steps, values = metrics[name]
                axes.plot(steps, values, "-", label=series_label(name))
        axes.set_title(panel_title, fontsize=9)
        axes.set_xlabel("step")
        axes.set_ylabel(y_label)
        log_axes(axes)
        if axes.lines:
            axes.legend(fontsize=8)
        axes.grid(True, which="both", alpha=0.3)
    figure.suptitle(title, **PLAIN_TEXT)
    return save_figure(figure, path)


def log_axes(axes: Any) -> None:
    """Steps on a symlog axis (step 0 stays drawn, linear up to 1) and values on a log axis (zeros, such as
    ΔK(0) and ‖w₀ − w₀‖, left out) where the drawn lines' positive values span more than DECADES_SPAN."""
    if spans_decades([line.get_xdata() for line in axes.lines]):
        axes.set_xscale("symlog", linthresh=1)
    if spans_decades([line.get_ydata() for line in axes.lines]):
        axes.set_yscale("log", nonpositive="mask")


def sweep_figure(
    fits: Sequence[FitResult | Mapping[str, Any]],
    *,
    x: str | None = None,
    y: str | None = None,
    title: str = "",
    path: str | None = None,
) -> Figure:
    """The service's fits of x (default: the first fit's) drawn as GET /v1/sweeps/{id}/plot draws them, one panel
    per y (only y's when given); nothing is re-fitted. ValueError, naming the fits there are, when none matches."""
    chosen = fits_of([_fit(fit) for fit in fits], x=x, y=y)
    return save_figure(fits_figure(chosen, title=title), path)


def fits_of(fits: Sequence[FitResult], *, x: str | None, y: str | None) -> list[FitResult]:
    """`chosen_fits` (the service plot's choice), or ValueError naming the sweep's fits when none matches."""
    chosen = chosen_fits(fits, x=x, y=y)
    if not chosen:
        have = ", ".join(dict.fromkeys(f"{fit.y} against {fit.x}" for fit in fits)) or "none"
        raise ValueError(
            f"the sweep has no fit of {y or 'any y'} against {x or 'any x'} (its fits: {have}); "
            "client.sweeps.plot_image(sweep_id, x=..., y=...) has the service fit and draw any pair"
        )
    return chosen


def _fit(fit: FitResult | Mapping[str, Any]) -> FitResult:
    """A fit as the service returned it, model or dict; keys a newer service adds are ignored."""
    if isinstance(fit, FitResult):
        return fit
    return FitResult.model_validate({key: fit[key] for key in FitResult.model_fields if key in fit})

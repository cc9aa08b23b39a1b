"""Log–log plot of a sweep: seed-averaged points with error bars and each group's fitted line."""

from __future__ import annotations

import io
from typing import Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from service.sweep_analysis import GroupFit, describe  # noqa: E402
from workers.engine.fit_figure import draw_power_law, log_log_axes  # noqa: E402

MEDIA_TYPES = {"png": "image/png", "svg": "image/svg+xml"}


def render_fits(fits: list[GroupFit], *, x: str, y: str, fmt: Literal["png", "svg"] = "png") -> bytes:
    """Draw every group's points (mean ± std over seeds) and fitted power law on log–log axes."""
    figure, axes = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    try:
        for group_fit in fits:
            if group_fit.result is not None:
                draw_power_law(axes, group_fit.result, describe(group_fit), error_bars=True)
        log_log_axes(axes, x=x, y=y, legend_fontsize=7)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format=fmt)
        return buffer.getvalue()
    finally:
        plt.close(figure)

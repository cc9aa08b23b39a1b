"""A sweep's plot as the service serves it: the fits' figure (ntklab.analysis.fit_figure) as PNG or SVG bytes."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Literal

from ntklab.analysis.fit_figure import fits_figure
from ntklab.api_schemas.sweeps import FitResult

MEDIA_TYPES = {"png": "image/png", "svg": "image/svg+xml"}


def render_fits(
    fits: Sequence[FitResult], *, title: str = "", x: str = "", y: str = "", fmt: Literal["png", "svg"] = "png"
) -> bytes:
    """`fits_figure(fits, title=…)` saved as `fmt`; the figure is built without pyplot, so there is no global state to close."""
    buffer = io.BytesIO()
    fits_figure(fits, title=title, x=x, y=y).savefig(buffer, format=fmt)
    return buffer.getvalue()

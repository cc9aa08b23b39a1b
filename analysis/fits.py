"""Power-law fits y ≈ c·x^s: least squares on (log x, log y) with a 95% interval on the slope.

Repeated runs at one x (seeds) are averaged first, so the fit sees one point per x and
the interval reflects the spread across widths, not the number of seeds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class AveragedPoint:
    """The mean and standard deviation of y over the runs at one x (std 0 for a single run)."""

    x: float
    y_mean: float
    y_std: float
    runs: int


@dataclass(frozen=True)
class PowerLawFit:
    """slope s and intercept log c of log y = log c + s·log x; interval = 95% t-interval on s.

    The interval is None with two points (no residual degrees of freedom); R² is None when
    every y is the same (no variance to explain)."""

    slope: float
    intercept: float
    slope_low: float | None
    slope_high: float | None
    r_squared: float | None
    points: list[AveragedPoint]

    @property
    def half_width(self) -> float | None:
        return None if self.slope_high is None else (self.slope_high - self.slope)


def average_repeats(xs: list[float], ys: list[float]) -> list[AveragedPoint]:
    """Group (x, y) pairs by x and average y; keeps only x > 0 and finite y > 0 (log–log)."""
    groups: dict[float, list[float]] = defaultdict(list)
    for x, y in zip(xs, ys):
        if x is not None and y is not None and x > 0 and math.isfinite(y) and y > 0:
            groups[float(x)].append(float(y))
    points = []
    for x in sorted(groups):
        values = np.asarray(groups[x])
        points.append(
            AveragedPoint(x, float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0, len(values))
        )
    return points


def fit_power_law(xs: list[float], ys: list[float]) -> PowerLawFit | None:
    """Fit log y = a + s log x over the seed-averaged points; None with fewer than two distinct x."""
    points = average_repeats(xs, ys)
    if len(points) < 2:
        return None
    log_x = np.log([p.x for p in points])
    log_y = np.log([p.y_mean for p in points])
    line = stats.linregress(log_x, log_y)
    low = high = None
    if len(points) > 2:
        half = float(stats.t.ppf(0.975, len(points) - 2) * np.nan_to_num(line.stderr))
        low, high = float(line.slope) - half, float(line.slope) + half
    r_squared = float(line.rvalue**2) if np.ptp(log_y) > 0 else None
    return PowerLawFit(
        slope=float(line.slope),
        intercept=float(line.intercept),
        slope_low=low,
        slope_high=high,
        r_squared=r_squared,
        points=points,
    )

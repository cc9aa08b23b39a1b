"""Sweeps: a base job spec, a grid over dotted spec paths, and the power-law fits wanted."""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue, field_validator

from ntklab.api_schemas.base import Name, StoredJson, StoredText, Tag, stored_text
from ntklab.api_schemas.run_warnings import RunWarning
from ntklab.api_schemas.spec import Strict

PATH_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+))*$"
MAX_GRID_AXES = 8
MAX_THEORY_SLOPE = 100.0


class FitSpec(Strict):
    """A log–log least-squares fit of summary scalar `y` against grid path `x`, one per group."""

    y: stored_text(100, min_length=1) = Field(examples=["delta_k_max"])
    x: str = Field(pattern=PATH_PATTERN, max_length=200, examples=["model.hidden.0"])
    group_by: list[stored_text(200)] = Field(default_factory=list, max_length=MAX_GRID_AXES)
    theory: dict[stored_text(400), Annotated[float, Field(ge=-MAX_THEORY_SLOPE, le=MAX_THEORY_SLOPE)]] = Field(
        default_factory=dict,
        max_length=64,
        examples=[{"linear head": -0.5, "swish head": 0.0}],
        description="the slope a theory predicts, per group label (analysis/labels.py: 'linear head', 'ntk', "
        "'all' for a fit without group_by); drawn dashed beside the fit and returned as theory_slope",
    )


class SweepSpec(Strict):
    """`base` is a job spec (JSON); `grid` maps a dotted path to the values it takes.

    Paths address dict keys and list items: `model.hidden.1` is the second hidden width.
    The sweep is the cartesian product of the grid's axes; `seed` is an ordinary axis.
    A linked axis names several comma-separated paths that move together, each value a
    list with one entry per path: `{"model.hidden.0,model.hidden.2": [[100, 100], [1000, 1000]]}`.
    """

    name: Name | None = None
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    base: dict[StoredText, StoredJson] = Field(default_factory=dict)
    grid: dict[str, list[StoredJson]] = Field(min_length=1, max_length=MAX_GRID_AXES)
    fits: list[FitSpec] = Field(default_factory=list, max_length=16)

    @field_validator("grid")
    @classmethod
    def _paths_and_values(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for axis, values in grid.items():
            paths = axis.split(",")
            for path in paths:
                if not re.match(PATH_PATTERN, path):
                    raise ValueError(f"grid path {path!r} is not a dotted path like 'model.hidden.0'")
            if not values:
                raise ValueError(f"grid.{axis} lists no values")
            if len(paths) > 1 and any(not isinstance(v, list) or len(v) != len(paths) for v in values):
                raise ValueError(f"grid.{axis} links {len(paths)} paths: each value must be a list of {len(paths)}")
        return grid


SweepStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "partial"]


class SweepRow(Strict):
    """One job of a sweep: its grid values (dotted path → value), its summary scalars and its warnings."""

    job_id: str
    status: str
    values: dict[str, JsonValue]
    summary: dict[str, JsonValue]
    warnings: list[RunWarning] = Field(default_factory=list, description="the job's warnings (as on the job)")


class FitPoint(Strict):
    x: float
    y_mean: float
    y_std: float
    runs: int


class FitResult(Strict):
    """log y = intercept + slope·log x over one group's seed-averaged points; 95% t-interval on the slope."""

    y: str
    x: str
    group_by: list[str]
    group: dict[str, JsonValue]
    slope: float | None
    slope_low: float | None
    slope_high: float | None
    intercept: float | None
    r_squared: float | None
    points: list[FitPoint]
    verdict: str
    group_label: str = Field("", description="the group in words: 'linear head', 'ntk', 'all' without group_by")
    theory_slope: float | None = Field(None, description="the fit spec's theory slope for this group, if it states one")
    x_label: str = Field("", description="x in the paper's symbols, e.g. 'width m', 'bottleneck width m_b'")
    y_label: str = Field("", description="y in the paper's symbols, e.g. 'ΔK', '‖H‖ at init'")
    warnings: list[RunWarning] = Field(
        default_factory=list,
        description="the warnings of the points fitted, one per code: how many points and which jobs",
    )


class SweepState(Strict):
    """What Sweep and SweepSummary both say of a sweep: status, counts and total over all its jobs."""

    id: str
    object: Literal["sweep"] = "sweep"
    name: str | None
    tags: list[str]
    status: SweepStatus
    counts: dict[str, int]
    total: int
    cancel_requested: bool
    created_at: dt.datetime


class Sweep(SweepState):
    """A sweep as the API shows it: status and counts derived from its jobs, the table, the fits.

    status, counts, total and fits are over all the sweep's jobs; `table` is one page of its
    rows in grid order (GET /v1/sweeps/{id}?limit=&after=): `has_more` says whether rows follow,
    and `next` is the `after` that reads them. `spec.base` is the base spec as stored, every
    default written out.
    """

    spec: SweepSpec
    table: list[SweepRow]
    has_more: bool = False
    next: str | None = None
    fits: list[FitResult]


class SweepSummary(SweepState):
    """A sweep as GET /v1/sweeps lists it: what Sweep says about it but its spec, table and fits.

    `axes` are the grid's paths as submitted (a linked axis is "a,b"); status, counts and
    total are over all the sweep's jobs, as in Sweep.
    """

    axes: list[str]


class SweepPage(Strict):
    """One page of sweeps, newest first; pass `next` as `after` to get the following page."""

    object: Literal["list"] = "list"
    data: list[SweepSummary]
    has_more: bool
    next: str | None = Field(description="opaque cursor for the next page, null on the last page")


class PresetInfo(Strict):
    name: str
    title: str
    claim: str
    scales: list[str]
    jobs: dict[str, int] = Field(description="jobs the preset makes at each scale")
    theory: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="the slopes the theory predicts: {y: {group label: slope}} (its fits' theory)"
    )


class PresetList(Strict):
    object: Literal["list"] = "list"
    data: list[PresetInfo]


class PresetRun(Strict):
    """smoke: seconds (tests); cpu: minutes on a 2-core CPU; paper: the paper's widths, for a GPU worker."""

    scale: Literal["smoke", "cpu", "paper"] = "cpu"

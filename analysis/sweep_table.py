"""A sweep's table and fits, derived from its jobs' grid values and summaries.

Each row is one job: its grid values, its full spec, its summary scalars and its warnings. A
fit reads x and the `group_by` paths from the job's spec (so `model.hidden.0` works whichever
axis set it), groups the rows, and fits log y against log x per group (seeds averaged first);
each fit carries the warnings of the points it was fitted on (analysis/fit_warnings.py), and one of its
own where it compares widths in standard parameterization at a fixed lr (analysis/width_regime.py).
`fit_results` gives those fits in their wire form (api_schemas FitResult): what the API returns
and what both the service's plot and the SDK's figure draw.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ntklab.analysis.fit_warnings import fit_warnings
from ntklab.analysis.fits import PowerLawFit, fit_power_law
from ntklab.analysis.labels import axis_label, group_label
from ntklab.analysis.width_regime import standard_fixed_lr
from ntklab.api_schemas.run_warnings import RunWarning
from ntklab.api_schemas.sweeps import FitPoint, FitResult, FitSpec


@dataclass(frozen=True)
class SweepRow:
    job_id: str
    status: str
    values: dict[str, Any]
    spec: dict[str, Any]
    summary: dict[str, Any]
    warnings: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class GroupFit:
    fit: FitSpec
    group: dict[str, Any]
    result: PowerLawFit | None
    warnings: list[RunWarning] = field(default_factory=list)


def get_path(spec: Any, path: str) -> Any:
    """spec[a][b][0] for "a.b.0"; None where the path leads nowhere."""
    node = spec
    for key in path.split("."):
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return None
    return node


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fit_groups(rows: list[SweepRow], fit: FitSpec) -> list[GroupFit]:
    """One power-law fit of summary[fit.y] against values[fit.x] per group of succeeded rows."""
    groups: dict[tuple, list[SweepRow]] = defaultdict(list)
    for row in rows:
        if row.status == "succeeded":
            groups[tuple(repr(get_path(row.spec, path)) for path in fit.group_by)].append(row)
    results = []
    for key in sorted(groups):
        members = groups[key]
        xs = [_number(get_path(row.spec, fit.x)) for row in members]
        ys = [_number(row.summary.get(fit.y)) for row in members]
        group = {path: get_path(members[0].spec, path) for path in fit.group_by}
        widths = [get_path(row.spec, fit.x) for row in members]
        warnings = fit_warnings(members) + standard_fixed_lr(members, fit.x, fit.y, widths)
        results.append(GroupFit(fit, group, fit_power_law(xs, ys), warnings))
    return results


def describe(group_fit: GroupFit) -> str:
    """A one-line verdict such as "linear head: delta_k_max ∝ x^-0.49 ± 0.05 (R² 0.98, 3 points)";
    a fit without group_by starts with its y ("weight_change_linf ∝ x^-0.50 …")."""
    label = "" if not group_fit.group else f"{group_label(group_fit.group)}: "
    result = group_fit.result
    if result is None:
        return f"{label}too few points to fit {group_fit.fit.y}"
    spread = "" if result.half_width is None else f" ± {result.half_width:.2f}"
    r_squared = "n/a" if result.r_squared is None else f"{result.r_squared:.2f}"
    return f"{label}{group_fit.fit.y} ∝ x^{result.slope:+.2f}{spread} (R² {r_squared}, {len(result.points)} points)"


def fit_results(rows: list[SweepRow], fit: FitSpec) -> list[FitResult]:
    """`fit_groups` in wire form: per group its slope, 95% interval, intercept, R², points, verdict,
    the group and axes in words (analysis/labels.py) and the theory slope the fit spec states for the group."""
    hidden = next((get_path(row.spec, "model.hidden") for row in rows if row.status == "succeeded"), None)
    x_label, y_label = axis_label(fit.x, hidden if isinstance(hidden, list) else None), axis_label(fit.y)
    return [_fit_result(group_fit, x_label, y_label) for group_fit in fit_groups(rows, fit)]


def _fit_result(group_fit: GroupFit, x_label: str, y_label: str) -> FitResult:
    result = group_fit.result
    label = group_label(group_fit.group)
    return FitResult(
        y=group_fit.fit.y,
        x=group_fit.fit.x,
        group_by=group_fit.fit.group_by,
        group=group_fit.group,
        slope=None if result is None else result.slope,
        slope_low=None if result is None else result.slope_low,
        slope_high=None if result is None else result.slope_high,
        intercept=None if result is None else result.intercept,
        r_squared=None if result is None else result.r_squared,
        points=[]
        if result is None
        else [FitPoint(x=p.x, y_mean=p.y_mean, y_std=p.y_std, runs=p.runs) for p in result.points],
        verdict=describe(group_fit),
        warnings=group_fit.warnings,
        group_label=label,
        theory_slope=group_fit.fit.theory.get(label),
        x_label=x_label,
        y_label=y_label,
    )


def table_paths(spec: dict) -> list[str]:
    """The dotted paths a row shows: the grid's (linked axes "a,b" split) and every fit's x and group_by,
    so a fit's axis is in the table even when a linked axis set it (e.g. x = model.hidden.0 of model.hidden)."""
    grid = [path for axis in spec.get("grid", {}) for path in axis.split(",")]
    fits = [path for fit in spec.get("fits", []) for path in (fit["x"], *fit.get("group_by", []))]
    return list(dict.fromkeys(grid + fits))


def table(sweep_spec: dict, jobs: Iterable[Any]) -> list[SweepRow]:
    """One row per job (anything with id, status, spec, summary and, once finished, warnings), showing the
    `table_paths` of the sweep; a job without warnings (unfinished, or none given) shows none."""
    paths = table_paths(sweep_spec)
    return [
        SweepRow(
            job.id,
            job.status,
            {path: get_path(job.spec, path) for path in paths},
            job.spec,
            job.summary or {},
            getattr(job, "warnings", None) or [],
        )
        for job in jobs
    ]


def derive_status(counts: Counter, cancel_requested: bool) -> str:
    """queued/running while any job is active; then succeeded, cancelled, failed or partial.

    `succeeded` needs at least one job and every job succeeded: a sweep left with no jobs
    (each deleted once it was cancelled or had failed) has nothing that succeeded, and is
    `cancelled` — as is one whose jobs were all cancelled, or whose cancel was asked for.
    """
    total = sum(counts.values())
    if counts["running"] or (counts["queued"] and counts["queued"] < total):
        return "running"
    if counts["queued"]:
        return "queued"
    if total and counts["succeeded"] == total:
        return "succeeded"
    if cancel_requested or counts["cancelled"] == total:
        return "cancelled"
    return "partial" if counts["succeeded"] else "failed"

"""A sweep's table and fits, derived from its jobs' grid values and summaries.

Each row is one job: its grid values, its full spec and its summary scalars. A fit reads
x and the `group_by` paths from the job's spec (so `model.hidden.0` works whichever axis
set it), groups the rows, and fits log y against log x per group (seeds averaged first).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from api_schemas.sweeps import FitSpec
from workers.engine.fits import PowerLawFit, fit_power_law


@dataclass(frozen=True)
class SweepRow:
    job_id: str
    status: str
    values: dict[str, Any]
    spec: dict[str, Any]
    summary: dict[str, Any]


@dataclass(frozen=True)
class GroupFit:
    fit: FitSpec
    group: dict[str, Any]
    result: PowerLawFit | None


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
        results.append(GroupFit(fit, group, fit_power_law(xs, ys)))
    return results


def describe(group_fit: GroupFit) -> str:
    """A one-line verdict such as "output_activation=identity: delta_k_max ∝ m^-0.49 ± 0.05 (R² 0.98)"."""
    label = ", ".join(f"{path.split('.')[-1]}={value}" for path, value in group_fit.group.items()) or "all"
    result = group_fit.result
    if result is None:
        return f"{label}: too few points to fit {group_fit.fit.y}"
    spread = "" if result.half_width is None else f" ± {result.half_width:.2f}"
    r_squared = "n/a" if result.r_squared is None else f"{result.r_squared:.2f}"
    return f"{label}: {group_fit.fit.y} ∝ x^{result.slope:+.2f}{spread} (R² {r_squared}, {len(result.points)} points)"

"""The fit warning of a width comparison outside the paper's regime: standard parameterization at a fixed lr.

Liu, Zhu & Belkin's ΔK = O(1/√m) is a statement in the NTK parameterization (or, equivalently, with a
learning rate scaled to the kernel). Under standard parameterization the tangent kernel grows with the
width m: the readout's block is Σ_i α_i² ≈ m·E[σ²], so ‖K‖ = Θ(m). Gradient descent at a fixed lr η
moves f(w) by −η·K·∇_f L, an effective step η·‖K‖ that grows like m: at a fixed η a wider network
takes larger steps (or diverges), and ΔK need not fall with width. lr "auto" (1/λ_max of the
loss's Gauss–Newton matrix, so of K) scales the step with width and is outside this warning, as is
an lr that changes along the fit (a linked axis over widths and lrs).

    STANDARD_FIXED_LR   raised on a fit whose x is a width — model.hidden.<i> (model.hidden), or a graph
                        layer's model.layers.<i>(.layers.<j>…).width — and whose y is measured after
                        training (not a value at init, `…_init`, which no lr changes), over the points
                        in standard parameterization whose training.lr is a number shared by points of
                        two or more widths; `values`: points, of, job_ids (as analysis/fit_warnings.py),
                        x and the lrs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Protocol

from ntklab.api_schemas.run_warnings import RunWarning

STANDARD_FIXED_LR = "standard_parameterization_fixed_lr"
WIDTH_PATH = re.compile(r"^model\.(hidden(\.\d+)?|layers\.\d+(\.layers\.\d+)*\.width)$")


class Point(Protocol):
    job_id: str
    spec: dict[str, Any]


def is_width_path(path: str) -> bool:
    """A dotted spec path that sets a layer's width: model.hidden.0, model.hidden, model.layers.2.width, …"""
    return WIDTH_PATH.match(path) is not None


def standard_fixed_lr(points: Sequence[Point], x: str, y: str, widths: Sequence[Any]) -> list[RunWarning]:
    """[the STANDARD_FIXED_LR warning] when x is a width path, y is not a value at init, and some standard-parameterization
    points share a numeric lr across two or more widths (widths[k] is point k's value of x), else []."""
    if not is_width_path(x) or y.endswith("_init"):
        return []
    widths_at: dict[float, dict[str, Any]] = defaultdict(dict)
    for point, width in zip(points, widths):
        model, training = point.spec.get("model") or {}, point.spec.get("training") or {}
        lr = training.get("lr")
        if model.get("parameterization") == "standard" and isinstance(lr, (int, float)) and not isinstance(lr, bool):
            widths_at[float(lr)][point.job_id] = repr(width)
    flagged = {lr: jobs for lr, jobs in widths_at.items() if len(set(jobs.values())) >= 2}
    if not flagged:
        return []
    job_ids = [point.job_id for point in points if any(point.job_id in jobs for jobs in flagged.values())]
    lrs = sorted(flagged)
    return [
        RunWarning(
            code=STANDARD_FIXED_LR,
            message=(
                f"{len(job_ids)} of {len(points)} points: this fit compares widths ({x}) in standard parameterization at a "
                f"fixed training.lr = {', '.join(f'{lr:g}' for lr in lrs)}. The paper's regime is the NTK "
                'parameterization, or an lr scaled with width (lr "auto"): under standard parameterization the '
                "tangent kernel grows like the width, so a fixed lr is an effective step that grows with width, "
                "and ΔK need not fall with width"
            ),
            values={"points": len(job_ids), "of": len(points), "job_ids": job_ids, "x": x, "lr": lrs},
        )
    ]

"""The warnings of a fit: those of the sweep points it was fitted on, one per code.

A fit over points that did not converge, or whose Hessian is not certified, reads as a claim
about the network when it may be one about the run; so every code raised by any of its points
(api_schemas/run_warnings.py) is carried by the fit, with how many points raised it and which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ntklab.api_schemas.run_warnings import RunWarning


class Point(Protocol):
    job_id: str
    warnings: list[dict[str, Any]]


def fit_warnings(points: Sequence[Point]) -> list[RunWarning]:
    """Per code, in order of first appearance: "k of n points: <first point's message>", the job ids in values."""
    raised: dict[str, dict[str, dict[str, Any]]] = {}
    for point in points:
        for warning in point.warnings:
            raised.setdefault(warning["code"], {}).setdefault(point.job_id, warning)
    return [
        RunWarning(
            code=code,
            message=f"{len(by_job)} of {len(points)} points: {next(iter(by_job.values()))['message']}",
            values={"points": len(by_job), "of": len(points), "job_ids": list(by_job)},
        )
        for code, by_job in raised.items()
    ]

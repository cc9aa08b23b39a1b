"""The outcome of a run: named scalars, named series and binary artifacts, all JSON-safe."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ntklab.api_schemas.run_warnings import RunWarning

Scalar = float | int | bool | str | None


def finite_or_none(value: float | int | bool | str | None) -> Scalar:
    """JSON never carries NaN or Infinity: non-finite floats become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class Series:
    """A recorded metric: values[i] was measured at training step steps[i]."""

    steps: list[int] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)

    def append(self, step: int, value: float | None) -> None:
        self.steps.append(int(step))
        self.values.append(finite_or_none(None if value is None else float(value)))


@dataclass
class Artifact:
    """Bytes of a file (kernel .npy, weights .npz, eigenvalues .json) and its media type."""

    data: bytes
    media_type: str


@dataclass
class Result:
    """warnings: why a result should not be read at face value (engine/diagnostics/run_warnings.py)."""

    summary: dict[str, Scalar] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    warnings: list[RunWarning] = field(default_factory=list)

    def set(self, name: str, value: Scalar) -> None:
        self.summary[name] = finite_or_none(value)

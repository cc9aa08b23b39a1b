"""How a running job talks to whoever runs it: progress, metrics, and "should I stop?".

The engine asks `cancelled()` once per training step and, through a Checkpoint (Meter.checkpoint),
between the units of every long loop of the other phases: kernel passes and chunks, batches of
Hessian-vector products, layer maps of the infinite-width limit, nodes of an ONNX conversion.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Progress:
    """Where the job is: `step` of `total` in `phase` (e.g. "init", "train", "final"), eta in seconds."""

    step: int
    total: int
    phase: str
    eta_s: float | None = None


class JobCancelled(Exception):
    """Raised by the engine when `Callbacks.cancelled()` says so; the run stops at once."""


Checkpoint = Callable[[], None]
"""checkpoint(): raises JobCancelled if the job was cancelled; long loops call it between their units."""


def no_checkpoint() -> None:
    """The checkpoint of a computation run outside a job: it never stops."""


class Callbacks(Protocol):
    def progress(self, progress: Progress) -> None:
        """Called at least once per phase and at most once per training step."""

    def metric(self, name: str, step: int, value: float | None) -> None:
        """One recorded point of a series (value None when not finite)."""

    def cancelled(self) -> bool:
        """Asked once per training step and at every checkpoint; True makes the engine raise JobCancelled."""


class NullCallbacks:
    """Callbacks that ignore everything and never cancel."""

    def progress(self, progress: Progress) -> None:
        pass

    def metric(self, name: str, step: int, value: float | None) -> None:
        pass

    def cancelled(self) -> bool:
        return False

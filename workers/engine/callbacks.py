"""How a running job talks to whoever runs it: progress, metrics, and "should I stop?"."""

from __future__ import annotations

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


class Callbacks(Protocol):
    def progress(self, progress: Progress) -> None:
        """Called at least once per phase and at most once per training step."""

    def metric(self, name: str, step: int, value: float | None) -> None:
        """One recorded point of a series (value None when not finite)."""

    def cancelled(self) -> bool:
        """Asked once per training step; True makes the engine raise JobCancelled."""


class NullCallbacks:
    """Callbacks that ignore everything and never cancel."""

    def progress(self, progress: Progress) -> None:
        pass

    def metric(self, name: str, step: int, value: float | None) -> None:
        pass

    def cancelled(self) -> bool:
        return False

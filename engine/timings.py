"""Where a job's time goes: wall-clock seconds per phase, each second charged to exactly one phase.

    clock = PhaseClock()
    with clock("training"):
        ...                      # charged to training
        with clock("kernel"):
            ...                  # charged to kernel, not to training
    clock.seconds()  ->  {"training": …, "kernel": …}

Phases nest: the innermost open phase is charged, so the path diagnostics measured inside
the training loop count as themselves and the training phase keeps only the optimisation
steps. Time outside every phase is charged to none, so Σ seconds() ≤ clock.elapsed(); a run
that wraps all its real work leaves only bookkeeping outside (docs/diagnostics.md, "Timings").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class PhaseClock:
    """Exclusive wall time per named phase, from time.perf_counter, since the clock was made."""

    def __init__(self) -> None:
        self.started = self._mark = time.perf_counter()
        self._open: list[str] = []
        self._spent: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        """Charge the time inside the block to `phase` (less what nested phases take)."""
        self._charge()
        self._open.append(phase)
        try:
            yield
        finally:
            self._charge()
            self._open.pop()

    def seconds(self) -> dict[str, float]:
        """{phase: seconds} of every phase entered so far, in the order first entered."""
        self._charge()
        return dict(self._spent)

    @property
    def current(self) -> str | None:
        """The innermost open phase, None outside every phase."""
        return self._open[-1] if self._open else None

    def elapsed(self) -> float:
        """Seconds since the clock was made."""
        return time.perf_counter() - self.started

    def _charge(self) -> None:
        now = time.perf_counter()
        if self._open:
            phase = self._open[-1]
            self._spent[phase] = self._spent.get(phase, 0.0) + now - self._mark
        self._mark = now

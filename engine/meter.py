"""A run's phases, timed and reported: each phase's seconds go to a PhaseClock, and its start to the callbacks.

    meter.phase("kernel")      times the block as "kernel" and reports Progress(step, total, "kernel")
    meter.counted("hessian")   times the block as "hessian" and yields report(done, planned), which sends
                               Progress(done, planned, "hessian", eta) with eta = elapsed/done · (planned − done)
                               and is a checkpoint
    meter.checkpoint()         raises JobCancelled when the callbacks say the job was cancelled

Outside counted phases, `step` of `total` are training steps (step = the last one reached);
inside one they are the phase's own units (Hessian-vector products for "hessian").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ntklab.engine.callbacks import Callbacks, JobCancelled, Progress
from ntklab.engine.timings import PhaseClock

Report = Callable[[int, int], None]
"""report(done, planned): units of a counted phase done so far, of those planned (planned may shrink)."""


@dataclass
class Meter:
    """A run's callbacks and clock; `step` of `total` training steps for the phases that report in steps."""

    callbacks: Callbacks
    total: int
    step: int = 0
    clock: PhaseClock = field(default_factory=PhaseClock)

    @contextmanager
    def phase(self, name: str, *, report: bool = True) -> Iterator[None]:
        """Time the block as `name`; unless report=False, report Progress(step, total, name) as it starts."""
        with self.clock(name):
            if report:
                self.callbacks.progress(Progress(self.step, self.total, name))
            yield

    @contextmanager
    def counted(self, name: str) -> Iterator[Report]:
        """Time the block as `name` and yield its report(done, planned); Progress(0, 0, name) until the first report."""
        with self.clock(name):
            self.callbacks.progress(Progress(0, 0, name))
            started = time.perf_counter()

            def report(done: int, planned: int) -> None:
                self.checkpoint()
                elapsed = time.perf_counter() - started
                eta = elapsed / done * max(planned - done, 0) if done else None
                self.callbacks.progress(Progress(done, planned, name, eta))

            yield report

    def checkpoint(self) -> None:
        """Raise JobCancelled if the job was cancelled (ntklab.engine.callbacks.Checkpoint)."""
        if self.callbacks.cancelled():
            raise JobCancelled(f"cancelled during {self.clock.current or 'the run'}")

"""Interleaved timing: every implementation of a row once per round, `repeats` rounds, medians.

    round r = 1 … R:   t_r(impl) = wall time of one call of impl, impls in a fixed order

One untimed warm-up call of each first (imports, torch.func tracing, allocator). Interleaving
spreads the load of a shared machine over all implementations alike, so the ratios
median(peer) / median(ntklab) are fairer than the times themselves. An implementation that
raises is recorded as failed with the exception's first line and left out of later rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Timing:
    """seconds [rounds] of one implementation, or the reason it failed."""

    seconds: list[float] = field(default_factory=list)
    failed: str | None = None
    result: object = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds and self.failed is None else None


def interleaved(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, Timing]:
    """name -> Timing over `repeats` interleaved rounds after one warm-up call of each (its result kept)."""
    timings = {name: Timing() for name in calls}
    for name, call in calls.items():
        timings[name] = _first_call(call)
    for _ in range(repeats):
        for name, call in calls.items():
            if timings[name].failed is None:
                start = time.perf_counter()
                call()
                timings[name].seconds.append(time.perf_counter() - start)
    return timings


def _first_call(call: Callable[[], object]) -> Timing:
    try:
        return Timing(result=call())
    except Exception as error:  # a peer that cannot run the row: reported, not fatal
        return Timing(failed=f"{type(error).__name__}: {str(error).splitlines()[0][:80] if str(error) else ''}")


def seconds_cell(timing: Timing) -> str:
    return f"fails ({timing.failed})" if timing.failed else f"{timing.median:.3f}"


def ratio_cell(peer: Timing, ours: Timing) -> str:
    """median(peer) / median(ntklab): above 1 means ntklab is faster."""
    if peer.median is None or ours.median is None:
        return "–"
    return f"{peer.median / ours.median:.2f}×"

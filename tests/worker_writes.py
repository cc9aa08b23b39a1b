"""Metric series written into a job's rows the way a worker writes them, without a worker process."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from store.job_store import JobStore
from workers.heartbeat import SeriesBuffer

Point = tuple[str, int, float | None]
"""(series name, training step, value; None where it was not finite)"""


def claimed_by_a_worker(app, job_id: str) -> Callable[[Iterable[Point]], None]:
    """Claim the queued job as worker "w0" would; flush(points) is then one heartbeat's write of those points
    (workers.heartbeat.SeriesBuffer flushed through JobStore.report, with the last step as the progress)."""
    store = JobStore(app.state.sessions)
    claim = store.claim(job_id, worker="w0", device="cpu")
    buffer = SeriesBuffer()

    def flush(points: Iterable[Point]) -> None:
        points = list(points)
        for name, step, value in points:
            buffer.add(name, step, value)
        store.report(claim, {"progress_step": max(step for _, step, _ in points)}, buffer.take())

    return flush

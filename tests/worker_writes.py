"""What a worker writes into a job's rows, done by the test without a worker process.

The one place tests act as a worker: column updates of a job (written_by_a_worker), every job of a
sweep succeeded with a summary made from its spec (sweep_succeeded), and a claimed job's metric
series flushed heartbeat by heartbeat (claimed_by_a_worker).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ntklab.store.job_store import JobStore
from ntklab.store.models import Job
from ntklab.store.sweep_specs import job_spec
from ntklab.workers.heartbeat import SeriesBuffer

Point = tuple[str, int, float | None]
"""(series name, training step, value; None where it was not finite)"""


def written_by_a_worker(session: Session, job_id: str, **columns: Any) -> None:
    """Set the job's columns (status, summary, attempts, heartbeat_at, …) as a worker's write would; committed."""
    session.execute(update(Job).where(Job.id == job_id).values(**columns))
    session.commit()


def sweep_succeeded(session: Session, sweep_id: str, summary_of: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Every job of the sweep succeeded, with summary_of(the job's filled spec) as its summary; committed."""
    for job in session.scalars(select(Job).where(Job.sweep_id == sweep_id)).all():
        session.execute(
            update(Job).where(Job.id == job.id).values(status="succeeded", summary=summary_of(job_spec(job)))
        )
    session.commit()


def claimed_by_a_worker(app, job_id: str) -> Callable[[Iterable[Point]], None]:
    """Claim the queued job as worker "w0" would; flush(points) is then one heartbeat's write of those points
    (ntklab.workers.heartbeat.SeriesBuffer flushed through JobStore.report, with the last step as the progress)."""
    store = JobStore(app.state.sessions)
    claim = store.claim(job_id, worker="w0", device="cpu")
    buffer = SeriesBuffer()

    def flush(points: Iterable[Point]) -> None:
        points = list(points)
        for name, step, value in points:
            buffer.add(name, step, value)
        store.report(claim, {"progress_step": max(step for _, step, _ in points)}, buffer.take())

    return flush

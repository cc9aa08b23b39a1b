"""Which queued job a worker takes next: fair across owners, so one key's runaway sweep starves no one.

A broker message is a wake-up token: it still names a job, but the worker takes the
fairly-next queued job, ordered by
  1. the owner's running jobs, fewest first (an owner with k jobs on workers waits behind
     every owner with fewer);
  2. when the owner last had a job start, longest ago first (never: first) — with one
     worker, where nobody is running when it asks, this alone alternates between owners;
  3. the job's run order: each owner's submissions run oldest first, a job by its `seq`, a
     sweep's jobs by `run_order`, the same seqs handed out again by parameter count, largest
     first (longest-processing-time first: the grid's largest nets, last in grid order, would
     otherwise start last and run alone while the other workers idle; store/sweeps_repo.py).
Only owners that have queued jobs are counted, each by two correlated subqueries that the
(owner, status) and (owner, started_at) indexes answer without reading the owner's
finished history, so a claim costs the same after a million jobs as after ten. On PostgreSQL the
chosen row is locked with `FOR UPDATE SKIP LOCKED`, so concurrent workers pick different
rows; on SQLite (no row locks) the claim's conditional UPDATE decides and the loser picks again.
"""

from __future__ import annotations

from sqlalchemy import Select, func, select
from sqlalchemy.orm import aliased

from ntklab.store.models import Job


def fair_next_job() -> Select:
    """SELECT id, spec of the next queued job to run (one row, locked where the database can)."""
    waiting = select(Job.owner).where(Job.status == "queued").distinct().subquery()
    other = aliased(Job)
    running = select(func.count()).where(other.owner == waiting.c.owner, other.status == "running")
    last_start = select(func.max(other.started_at)).where(other.owner == waiting.c.owner)
    load = select(
        waiting.c.owner,
        running.scalar_subquery().label("running"),
        last_start.scalar_subquery().label("last_start"),
    ).subquery()
    return (
        select(Job.id, Job.spec)
        .join(load, load.c.owner == Job.owner)
        .where(Job.status == "queued", Job.cancel_requested.is_(False))
        .order_by(load.c.running, load.c.last_start.asc().nulls_first(), func.coalesce(Job.run_order, Job.seq))
        .limit(1)
        .with_for_update(of=Job, skip_locked=True)
    )

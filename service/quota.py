"""The active-jobs quota: an owner's queued + running jobs stay at or below `max_queued_jobs_per_key`.

`reserve(session, owner, adding, settings)` counts the owner's active jobs and refuses with
a 429 problem if `adding` more would pass the cap; the caller inserts its jobs and commits
inside the block. Two submissions of one owner must not both count before either commits,
so the count-and-insert runs under a per-owner lock: on PostgreSQL a transaction-scoped
advisory lock (released by the commit, shared by every API process); on SQLite the
database's write lock, taken up front by an UPDATE that changes no row and held until the
commit (so API processes on one file serialise their submissions), behind a lock in this
process (so this process's threads queue in memory rather than in SQLite's busy handler).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator

from sqlalchemy import false, func, select, update
from sqlalchemy.orm import Session

from api_schemas import problems as types
from api_schemas.problems import FieldError
from config.settings import Settings
from service.problems import ProblemError
from store import jobs_repo
from store.models import Job

_PROCESS_LOCK = threading.Lock()


@contextlib.contextmanager
def reserve(session: Session, owner: str, adding: int, settings: Settings) -> Iterator[None]:
    """Room for `adding` more active jobs of `owner`, held until the block (which commits) ends."""
    with _owner_lock(session, owner):
        active = jobs_repo.count_active(session, owner)
        if active + adding > settings.max_queued_jobs_per_key:
            raise _over_quota(active, adding, settings)
        yield


@contextlib.contextmanager
def _owner_lock(session: Session, owner: str) -> Iterator[None]:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(advisory_key(owner))))
        yield
        return
    with _PROCESS_LOCK:
        session.execute(update(Job).where(false()).values(seq=Job.seq))
        yield


def advisory_key(owner: str) -> int:
    """A signed 64-bit number naming the owner's quota lock (PostgreSQL advisory locks take a bigint)."""
    return int.from_bytes(hashlib.sha256(f"ntklab-quota:{owner}".encode()).digest()[:8], "big", signed=True)


def _over_quota(active: int, adding: int, settings: Settings) -> ProblemError:
    limit = settings.max_queued_jobs_per_key
    message = f"{active} jobs are queued or running and this request adds {adding}; the cap is {limit} per key (setting max_queued_jobs_per_key)"
    return ProblemError(
        429, message + "; wait for some to finish", type=types.TOO_MANY_ACTIVE_JOBS, title="Too many active jobs",
        errors=[FieldError(field="active_jobs", message=message, limit=limit, value=active)],
        headers={"Retry-After": str(settings.retry_after_s)},
    )

"""The active-jobs quota: an owner's queued + running jobs stay at or below `max_queued_jobs_per_key`.

`reserve(session, owner, adding, settings)` counts the owner's active jobs and refuses with
a 429 problem if `adding` more would pass the cap; the caller inserts its jobs and commits
inside the block. Two submissions of one owner must not both count before either commits,
so the count-and-insert runs under the owner's lock (store/owner_lock.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy.orm import Session

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import FieldError
from ntklab.config.settings import Settings
from ntklab.service.problems import ProblemError
from ntklab.store import jobs_repo
from ntklab.store.owner_lock import owner_lock


@contextlib.contextmanager
def reserve(session: Session, owner: str, adding: int, settings: Settings) -> Iterator[None]:
    """Room for `adding` more active jobs of `owner`, held until the block (which commits) ends."""
    with owner_lock(session, owner):
        active = jobs_repo.count_active(session, owner)
        if active + adding > settings.max_queued_jobs_per_key:
            raise _over_quota(active, adding, settings)
        yield


def _over_quota(active: int, adding: int, settings: Settings) -> ProblemError:
    limit = settings.max_queued_jobs_per_key
    message = f"{active} jobs are queued or running and this request adds {adding}; the cap is {limit} per key (setting max_queued_jobs_per_key)"
    return ProblemError(
        429,
        message + "; wait for some to finish",
        type=types.TOO_MANY_ACTIVE_JOBS,
        title="Too many active jobs",
        errors=[FieldError(field="active_jobs", message=message, limit=limit, value=active)],
        headers={"Retry-After": str(settings.retry_after_s)},
    )

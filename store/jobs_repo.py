"""The API's queries on jobs, their tags, metric chunks and artifacts; every one is scoped to an owner.

A read scope is an owner id, or None for the admin key, which sees every owner's jobs.

Paging is newest first by `Job.seq` (the insertion order): a page holds the `limit` jobs
with the largest seq below the cursor, so jobs created while a client pages never shift
the pages it has not read yet, and every job present at the start is visited once.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, exists, func, select, update
from sqlalchemy.orm import Session, defer

from ntklab.store import artifacts_repo
from ntklab.store.models import FINISHED_STATUSES, Job, JobTag, MetricChunk, new_id, utcnow
from ntklab.store.sweep_specs import job_spec

ACTIVE_STATUSES = ("queued", "running")
CURSOR_PREFIX = "seq:"
MAX_SEQ = 2**31 - 1
"""The largest `seq` (an SQL INTEGER column) a cursor may stand for."""


@dataclass(frozen=True)
class JobFilter:
    statuses: Sequence[str] = ()
    tag: str | None = None
    sweep_id: str | None = None


def create_job(
    session: Session,
    *,
    owner: str,
    spec: dict,
    spec_hash: str,
    parameters: int,
    idempotency_key: str | None,
    estimate: dict | None = None,
    sweep_id: str | None = None,
    spec_patch: dict | None = None,
) -> Job:
    """A queued job named, tagged and sized by its full `spec`; a sweep's job stores only its
    `spec_patch` against the sweep's base (store/sweep_specs.py), a job on its own its spec.
    `estimate` is its estimate's document (store/job_estimates.py), made once at submission."""
    now = utcnow()
    job = Job(
        id=new_id("job"),
        owner=owner,
        sweep_id=sweep_id,
        name=spec.get("name"),
        spec=None if spec_patch is not None else spec,
        spec_patch=spec_patch,
        spec_hash=spec_hash,
        idempotency_key=idempotency_key,
        parameters=parameters,
        estimate=estimate,
        status="queued",
        progress_total=spec["training"]["max_steps"],
        created_at=now,
        enqueued_at=now,
    )
    session.add(job)
    session.add_all(JobTag(job_id=job.id, tag=tag) for tag in dict.fromkeys(spec.get("tags", ())))
    return job


def spec_tags(job: Job) -> list[str]:
    """A job's tags from its spec, sorted as `tags_of` sorts them (the JobTag rows, kept for filtering, hold the same)."""
    return sorted(set(job_spec(job).get("tags", ())))


def find_by_idempotency_key(session: Session, owner: str, key: str) -> Job | None:
    return session.scalar(select(Job).where(Job.owner == owner, Job.idempotency_key == key))


def visible(scope: str | None) -> tuple:
    """The WHERE clauses that keep a query to the rows `scope` may see."""
    return () if scope is None else (Job.owner == scope,)


def get_job(session: Session, scope: str | None, job_id: str, *, fresh: bool = False) -> Job | None:
    """The job if `scope` may see it; `fresh`: read again even if this session holds it (None once deleted)."""
    query = select(Job).where(*visible(scope), Job.id == job_id)
    return session.scalar(query.execution_options(populate_existing=True) if fresh else query)


def tags_of(session: Session, job_ids: Sequence[str]) -> dict[str, list[str]]:
    tags: dict[str, list[str]] = {job_id: [] for job_id in job_ids}
    if job_ids:
        rows = session.execute(select(JobTag.job_id, JobTag.tag).where(JobTag.job_id.in_(job_ids)).order_by(JobTag.tag))
        for job_id, tag in rows:
            tags[job_id].append(tag)
    return tags


def list_page(
    session: Session, scope: str | None, where: JobFilter, limit: int, before_seq: int | None
) -> tuple[list[Job], bool]:
    """Up to `limit` jobs (without their spec) newest first, and whether more follow."""
    query = select(Job).options(defer(Job.spec)).where(*visible(scope))
    if where.statuses:
        query = query.where(Job.status.in_(where.statuses))
    if where.sweep_id is not None:
        query = query.where(Job.sweep_id == where.sweep_id)
    if where.tag is not None:
        query = query.where(exists().where(JobTag.job_id == Job.id, JobTag.tag == where.tag))
    if before_seq is not None:
        query = query.where(Job.seq < before_seq)
    jobs = list(session.scalars(query.order_by(Job.seq.desc()).limit(limit + 1)))
    return jobs[:limit], len(jobs) > limit


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"{CURSOR_PREFIX}{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int | None:
    """The seq a cursor stands for, or None when it is not one of ours: not `seq:<digits>`, or a seq outside
    1…MAX_SEQ, which no row can have (PostgreSQL refuses to compare an INTEGER column with a larger number)."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    digits = text.removeprefix(CURSOR_PREFIX)
    if not text.startswith(CURSOR_PREFIX) or not digits.isascii() or not digits.isdigit():
        return None
    seq = int(digits)
    return seq if 1 <= seq <= MAX_SEQ else None


def count_active(session: Session, owner: str) -> int:
    return session.scalar(
        select(func.count()).select_from(Job).where(Job.owner == owner, Job.status.in_(ACTIVE_STATUSES))
    )


def count_by_status(session: Session) -> dict[str, int]:
    return dict(session.execute(select(Job.status, func.count()).group_by(Job.status)).all())


def request_cancel(session: Session, scope: str | None, job_id: str) -> None:
    """queued → cancelled at once; running → cancel_requested, which the worker reads every heartbeat tick."""
    now = utcnow()
    mine = (*visible(scope), Job.id == job_id)
    cancelled = session.execute(
        update(Job)
        .where(*mine, Job.status == "queued")
        .values(status="cancelled", cancel_requested=True, progress_phase="cancelled", finished_at=now)
    ).rowcount
    if not cancelled:
        session.execute(update(Job).where(*mine, Job.status == "running").values(cancel_requested=True))
    session.commit()


def delete_finished(session: Session, scope: str | None, job_id: str) -> bool:
    """Delete a finished job; its tags, metric chunks and artifacts go with it (ON DELETE CASCADE), and so do the
    blobs only its artifacts used (store/artifacts_repo.py)."""
    if session.scalar(select(exists().where(*visible(scope), Job.id == job_id, Job.status.in_(FINISHED_STATUSES)))):
        artifacts_repo.delete_all(session, job_id)
    deleted = session.execute(
        delete(Job).where(*visible(scope), Job.id == job_id, Job.status.in_(FINISHED_STATUSES))
    ).rowcount
    session.commit()
    return bool(deleted)


def read_series(
    session: Session, job_id: str, names: Sequence[str], since_step: int | None = None
) -> dict[str, tuple[list, list]]:
    """{name: (steps, values)}: each series is its chunks concatenated in chunk order; all series if no names.

    With `since_step`, only the points whose step is greater: the chunks with last_step > since_step, a
    range of the index (job_id, last_step), trimmed to those points; a series with none is left out.
    """
    query = select(MetricChunk.name, MetricChunk.steps, MetricChunk.values).where(MetricChunk.job_id == job_id)
    if since_step is not None:
        query = query.where(MetricChunk.last_step > since_step)
    if names:
        query = query.where(MetricChunk.name.in_(names))
    series: dict[str, tuple[list, list]] = {}
    for name, steps, values in session.execute(query.order_by(MetricChunk.name, MetricChunk.chunk)):
        if since_step is not None:
            kept = [i for i, step in enumerate(steps) if step > since_step]
            steps, values = [steps[i] for i in kept], [values[i] for i in kept]
        all_steps, all_values = series.setdefault(name, ([], []))
        all_steps.extend(steps)
        all_values.extend(values)
    return series

"""The worker's writes to the jobs table: claim, heartbeat + progress + metric chunks, finish;
and its one read beside the claim, the bytes of the uploads a job names (read_uploads).

Every write after the claim is conditional on owning the row: `status = 'running'` and
`attempts` equal to the attempt this worker claimed. If the reaper gave the job to someone
else (this worker looked dead), the condition fails, nothing is written, and the caller is
told it lost the job. Transient database errors (OperationalError) are retried briefly.
A broker message is a wake-up token: `claim_next` takes the fairly-next queued job across
owners (store/fairness.py), so each message still leads to at most one claim.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from tenacity import retry, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_exponential

from ntklab.planner.estimate import Estimate
from ntklab.store import artifacts_repo, storage
from ntklab.store.fairness import fair_next_job
from ntklab.store.job_estimates import stored_estimate
from ntklab.store.models import Dataset, Job, MetricChunk, UploadedModel, utcnow
from ntklab.store.sweep_specs import job_spec
from ntklab.store.uploads_repo import read_blob

transient = retry_if_exception_type(OperationalError)
retry_briefly = retry(retry=transient, stop=stop_after_attempt(4), wait=wait_exponential(0.1, max=1.0), reraise=True)
retry_patiently = retry(retry=transient, stop=stop_after_delay(60), wait=wait_exponential(0.2, max=5.0), reraise=True)
CLAIM_TRIES = 5


class LostJob(Exception):
    """The row is no longer this worker's: it was requeued, cancelled or finished elsewhere."""


class MissingUpload(Exception):
    """A data set or model the job names is gone (deleted after the job was submitted)."""


@dataclass(frozen=True)
class UploadedBytes:
    """The stored bytes of the uploads a job names: data sets as (x .npy, y .npy), models as ONNX."""

    datasets: dict[str, tuple[bytes, bytes]]
    models: dict[str, bytes]


@dataclass(frozen=True)
class Claim:
    job_id: str
    attempt: int
    spec: dict
    device: str
    estimate: Estimate | None = None
    """The estimate stored at submission (store/job_estimates.py); None for a job stored before migration 0015."""


@dataclass(frozen=True)
class ChunkRow:
    name: str
    chunk: int
    steps: list[int]
    values: list[float | None]


def _owned(job_id: str, attempt: int):
    return (Job.id == job_id, Job.status == "running", Job.attempts == attempt)


class JobStore:
    def __init__(self, sessions: sessionmaker[Session]):
        self.sessions = sessions

    @retry_briefly
    def claim(self, job_id: str, worker: str, device: str) -> Claim | None:
        """queued → running, attempts + 1, and wipe an earlier attempt's chunks and artifacts; None if taken."""
        with self.sessions.begin() as session:
            return _claim_row(session, job_id, worker, lambda spec: device)

    @retry_briefly
    def claim_next(self, hint: str, worker: str, device_for: Callable[[dict], str]) -> Claim | None:
        """Claim the fairly-next queued job (store/fairness.py), which may or may not be `hint`; None if none.

        `hint` is the job the broker message named: cancelled here if a cancel is pending.
        `device_for(spec)` names the device the claimed job will run on.
        """
        for _ in range(CLAIM_TRIES):
            with self.sessions.begin() as session:
                _cancel_if_requested(session, hint)
                candidate = session.execute(fair_next_job()).first()
                if candidate is None:
                    return None
                claim = _claim_row(session, candidate.id, worker, device_for)
            if claim is not None:
                return claim
        return None

    @retry_briefly
    def report(self, claim: Claim, progress: dict | None, chunks: list[ChunkRow]) -> bool:
        """Heartbeat, optional progress columns and metric chunks in one transaction; returns cancel_requested."""
        with self.sessions.begin() as session:
            cancel = session.execute(
                update(Job)
                .where(*_owned(claim.job_id, claim.attempt))
                .values(heartbeat_at=utcnow(), **(progress or {}))
                .returning(Job.cancel_requested)
            ).scalar()
            if cancel is None:
                raise LostJob(claim.job_id)
            _insert_chunks(session, claim.job_id, chunks)
        return bool(cancel)

    @retry_patiently
    def finish(
        self,
        claim: Claim,
        status: str,
        *,
        summary: dict | Callable[[float], dict] | None = None,
        warnings: list[dict] | None = None,
        error: dict | None = None,
        chunks: list[ChunkRow] = (),
        replace_series: tuple[str, ...] = (),
        artifacts: dict | None = None,
        progress: dict | None = None,
        max_stored_bytes: int | None = None,
    ) -> None:
        """Store the outcome (summary, warnings, error), the last progress and the final status; raises LostJob
        if the row is not ours.

        A callable summary is called with the seconds this transaction spent writing the chunks and
        artifacts, and what it returns is stored, in the same transaction (a job's timings.storage).
        With `max_stored_bytes`, the artifacts are stored under the owner's storage quota (store/storage.py):
        each, in order, if it still fits; the others are named in the summary's `artifacts_skipped`."""
        now = utcnow()
        hashes = {name: hashlib.sha256(data).hexdigest() for name, (_, data) in (artifacts or {}).items()}
        with self.sessions.begin() as session:
            owner = storage.job_owner(session, claim.job_id) if artifacts else None
            if owner is not None:
                storage.lock_owner(session, owner)
                if max_stored_bytes is not None and summary is not None:
                    artifacts, skipped = _within_quota(session, owner, artifacts, hashes, max_stored_bytes)
                    summary = _naming_skipped(summary, skipped)
            phase = (progress or {}) | {
                "progress_phase": status,
                "progress_eta_s": 0.0 if status == "succeeded" else None,
            }
            writing = time.perf_counter()
            taken = session.execute(
                update(Job)
                .where(*_owned(claim.job_id, claim.attempt))
                .values(
                    status=status,
                    summary=None if callable(summary) else summary,
                    warnings=warnings,
                    error=error,
                    finished_at=now,
                    heartbeat_at=now,
                    **phase,
                )
            ).rowcount
            if not taken:
                raise LostJob(claim.job_id)
            if replace_series:
                session.execute(
                    delete(MetricChunk).where(MetricChunk.job_id == claim.job_id, MetricChunk.name.in_(replace_series))
                )
            _insert_chunks(session, claim.job_id, list(chunks))
            for name, (media_type, data) in (artifacts or {}).items():
                artifacts_repo.add(session, owner, claim.job_id, name, media_type, data, hashes[name], now)
            if callable(summary):
                timed = summary(time.perf_counter() - writing)
                session.execute(update(Job).where(Job.id == claim.job_id).values(summary=timed))

    @retry_briefly
    def read_uploads(self, job_id: str, dataset_ids: tuple[str, ...], model_ids: tuple[str, ...]) -> UploadedBytes:
        """The blobs of the job owner's data sets and models named; raises MissingUpload for one that is gone."""
        with self.sessions() as session:
            owner = select(Job.owner).where(Job.id == job_id).scalar_subquery()
            datasets, models = {}, {}
            for dataset_id in dataset_ids:
                row = session.execute(
                    select(Dataset.x_blob_id, Dataset.y_blob_id).where(Dataset.id == dataset_id, Dataset.owner == owner)
                ).first()
                if row is None:
                    raise MissingUpload(f"data set {dataset_id} no longer exists")
                datasets[dataset_id] = (read_blob(session, row.x_blob_id), read_blob(session, row.y_blob_id))
            for model_id in model_ids:
                blob_id = session.scalar(
                    select(UploadedModel.blob_id).where(UploadedModel.id == model_id, UploadedModel.owner == owner)
                )
                if blob_id is None:
                    raise MissingUpload(f"model {model_id} no longer exists")
                models[model_id] = read_blob(session, blob_id)
        return UploadedBytes(datasets, models)

    @retry_patiently
    def fail_running_on(self, worker: str, error: dict) -> list[str]:
        """Fail the jobs `worker` (a node name) is running, after its process was killed; returns their ids."""
        now = utcnow()
        with self.sessions.begin() as session:
            return list(
                session.scalars(
                    update(Job)
                    .where(Job.worker == worker, Job.status == "running")
                    .values(
                        status="failed",
                        error=error,
                        finished_at=now,
                        heartbeat_at=now,
                        progress_phase="failed",
                        progress_eta_s=None,
                    )
                    .returning(Job.id)
                )
            )


def _cancel_if_requested(session: Session, job_id: str) -> None:
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == "queued", Job.cancel_requested.is_(True))
        .values(status="cancelled", progress_phase="cancelled", finished_at=utcnow())
    )


def _claim_row(session: Session, job_id: str, worker: str, device_for: Callable[[dict], str]) -> Claim | None:
    """The conditional UPDATE only one worker can win, in the caller's transaction; the job's full spec
    (a sweep job's materialised from its sweep's base, store/sweep_specs.py) names its device."""
    _cancel_if_requested(session, job_id)
    job = session.scalar(select(Job).where(Job.id == job_id))
    if job is None:
        return None
    spec = job_spec(job)
    device = device_for(spec)
    now = utcnow()
    row = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == "queued", Job.cancel_requested.is_(False))
        .values(
            status="running",
            attempts=Job.attempts + 1,
            started_at=now,
            heartbeat_at=now,
            worker=worker,
            device=device,
            progress_phase="starting",
            progress_step=0,
            progress_eta_s=None,
            summary=None,
            warnings=None,
            error=None,
            finished_at=None,
        )
        .returning(Job.attempts)
    ).first()
    if row is None:
        return None
    session.execute(delete(MetricChunk).where(MetricChunk.job_id == job_id))
    artifacts_repo.delete_all(session, job_id)
    return Claim(job_id=job_id, attempt=row.attempts, spec=spec, device=device, estimate=stored_estimate(job.estimate))


def _within_quota(
    session: Session, owner: str, artifacts: dict, hashes: dict[str, str], limit: int
) -> tuple[dict, list[str]]:
    """The artifacts that fit the owner's storage quota, taken in order, and the skipped ones; the caller holds the
    owner's storage lock. An artifact whose content the owner already stores (or an earlier one here) adds nothing."""
    used = storage.usage(session, owner)
    kept, skipped, added = {}, [], set()
    for name, (media_type, data) in artifacts.items():
        adds = 0 if hashes[name] in added else storage.new_bytes(session, owner, [(hashes[name], len(data))])
        if adds and used + adds > limit:
            skipped.append(
                f"{name} ({len(data)} bytes; the key stores {used} of its quota of {limit}, "
                "setting max_stored_bytes_per_key)"
            )
        else:
            kept[name] = (media_type, data)
            used += adds
            added.add(hashes[name])
    return kept, skipped


def _naming_skipped(summary: dict | Callable[[float], dict], skipped: list[str]) -> dict | Callable[[float], dict]:
    if not skipped:
        return summary

    def named(found: dict) -> dict:
        earlier = found.get("artifacts_skipped")
        return found | {"artifacts_skipped": "; ".join(([earlier] if earlier else []) + skipped)}

    return (lambda seconds: named(summary(seconds))) if callable(summary) else named(summary)


def _insert_chunks(session: Session, job_id: str, chunks: list[ChunkRow]) -> None:
    if chunks:
        session.execute(
            insert(MetricChunk),
            [
                {"job_id": job_id, "name": c.name, "chunk": c.chunk, "steps": c.steps, "values": c.values}
                for c in chunks
            ],
        )

"""Recent succeeded jobs per worker class: what the dry run's measured calibration rests on (service/estimates.py).

    recent_runs(session, limit) -> {worker class: [FinishedRun, …]}   newest first, at most `limit` a class

A worker class is a job's `device` before any index ("cuda:0" → "cuda", "cpu" → "cpu"). One query names the
devices succeeded jobs ran on, then one per class reads its newest `limit` succeeded jobs by finished_at
(ix_jobs_status_device_finished_at: status, device, finished_at), loading only the columns the calibration
reads (the spec, its sweep's base, the summary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, load_only

from ntklab.store.models import Job
from ntklab.store.sweep_specs import job_spec


@dataclass(frozen=True)
class FinishedRun:
    """A succeeded job as the calibration reads it: its full spec, its hash, its device and its summary."""

    job_id: str
    device: str
    spec: dict[str, Any]
    spec_hash: str
    summary: dict[str, Any]


def worker_class(device: str) -> str:
    """ "cuda:0" → "cuda", "cpu" → "cpu", "mps" → "mps"."""
    return device.split(":", 1)[0]


def recent_runs(session: Session, limit: int) -> dict[str, list[FinishedRun]]:
    """The newest `limit` succeeded jobs of each worker class (by finished_at), newest first."""
    devices = session.scalars(
        select(Job.device).where(Job.status == "succeeded", Job.device.is_not(None)).distinct()
    ).all()
    by_class: dict[str, list[str]] = {}
    for device in devices:
        by_class.setdefault(worker_class(device), []).append(device)
    runs: dict[str, list[FinishedRun]] = {}
    for name, members in sorted(by_class.items()):
        jobs = session.scalars(
            select(Job)
            .options(load_only(Job.id, Job.device, Job.spec, Job.spec_patch, Job.spec_hash, Job.summary, Job.sweep_id))
            .where(Job.status == "succeeded", Job.device.in_(members))
            .order_by(Job.finished_at.desc(), Job.seq.desc())
            .limit(limit)
        ).all()
        runs[name] = [FinishedRun(job.id, job.device, job_spec(job), job.spec_hash, job.summary or {}) for job in jobs]
    return runs

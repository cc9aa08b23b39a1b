"""Submitting work: a job, a sweep, or a preset's sweep — validated, checked, stored once and published, or replayed.

The steps, in order, for each:
  1. the Idempotency-Key checked (service/idempotency.py);
  2. the uploads a spec names resolved, the owner's own only (service/uploads.py:resolve_uploads);
  3. every cap checked and the estimate made, once per job (service/caps.py:checked_spec);
  4. a key that already made a job or sweep: its first answer (the same body) or a 422 (another body);
  5. the active-jobs quota reserved (service/quota.py), the uploads held until the commit, the rows inserted with
     their estimates (store/job_estimates.py) and committed; a concurrent duplicate of the key loses at the
     commit and answers the winner's row;
  6. the jobs published to the broker; a publish that fails leaves them queued, and the reaper sends them again.

A sweep (POST /v1/sweeps, and POST /v1/presets/{name}): the base is validated once and stored once, on the
sweep row; the grid's points are made, checked and reduced to their patches one at a time (service/grid.py,
store/sweep_specs.py), their bytes counted against max_sweep_bytes as they come; then the sweep and all its
jobs are stored in one transaction and published as a group. Time and memory follow the base once plus the
points' patches, not points × base.

The routers (service/api/routes/) parse the request, call one of `submit_job`, `dry_run_job`, `submit_sweep`,
`submit_preset`, and shape the answer from the `Submitted` row.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import FieldError
from ntklab.api_schemas.resources import JobDryRun
from ntklab.api_schemas.spec import JobSpec
from ntklab.api_schemas.sweeps import SweepSpec
from ntklab.config.settings import Settings
from ntklab.service import quota
from ntklab.service.caps import CheckedSpec, checked_spec
from ntklab.service.estimates import dry_run
from ntklab.service.grid import GridError, GridPoint, SweepBase, grid_points, grid_size, point_document, sweep_base
from ntklab.service.idempotency import check_key, compact_json, digest, refuse_reuse, spec_hash, sweep_job_hash
from ntklab.service.presets import PRESETS
from ntklab.service.problems import ProblemError, summarize
from ntklab.service.uploads import resolve_uploads
from ntklab.store import jobs_repo, models, sweeps_repo, uploads_repo
from ntklab.store.db import ConstraintViolation, violations_raised
from ntklab.store.job_estimates import estimate_document
from ntklab.store.sweep_specs import patch_between
from ntklab.store.sweeps_repo import NewJob
from ntklab.workers.queue import Broker

log = logging.getLogger(__name__)

Row = TypeVar("Row", models.Job, models.Sweep)


@dataclass(frozen=True)
class Submitted(Generic[Row]):
    """The stored job or sweep, and whether it is an earlier request's (the same Idempotency-Key and body)."""

    row: Row
    replayed: bool = False


def dry_run_job(spec: JobSpec, idempotency_key: str | None, session, owner: str, settings: Settings) -> JobDryRun:
    """The job's estimate after the same validation and caps as `submit_job`; nothing is stored or queued, and
    neither the Idempotency-Key's earlier requests nor the quota are consulted."""
    check_key(idempotency_key)
    spec = resolve_uploads(spec, session, owner)
    return dry_run(spec, checked_spec(spec, settings), settings, session)


def submit_job(
    spec: JobSpec, idempotency_key: str | None, session, owner: str, settings: Settings, broker: Broker
) -> Submitted[models.Job]:
    """Store and publish one job (module docstring), or answer the job its Idempotency-Key made."""
    key = check_key(idempotency_key)
    spec = resolve_uploads(spec, session, owner)
    document = spec.model_dump(mode="json")
    digest_ = spec_hash(document)
    if key is not None and (first := jobs_repo.find_by_idempotency_key(session, owner, key)) is not None:
        return _replayed_job(first, digest_, key)
    checked = checked_spec(spec, settings)
    with quota.reserve(session, owner, 1, settings):
        hold_uploads(session, owner, [document])
        try:
            with violations_raised(session):
                job = jobs_repo.create_job(
                    session,
                    owner=owner,
                    spec=document,
                    spec_hash=digest_,
                    parameters=checked.parameters,
                    estimate=estimate_document(checked.estimate),
                    idempotency_key=key,
                )
                session.commit()
        except ConstraintViolation:
            first = jobs_repo.find_by_idempotency_key(session, owner, key) if key is not None else None
            if first is None:
                raise
            return _replayed_job(first, digest_, key)
    try:
        broker.enqueue(job.id)
    except Exception as error:
        log.warning("job %s stored but not published yet (the reaper retries): %s", job.id, error)
    return Submitted(job)


def submit_preset(
    name: str, scale: str, idempotency_key: str | None, session, owner: str, settings: Settings, broker: Broker
) -> Submitted[models.Sweep]:
    """The preset's sweep at `scale`, submitted as by `submit_sweep` (its key compared by that sweep); 404 for no such preset."""
    preset = PRESETS.get(name)
    if preset is None:
        raise ProblemError(404, f"no preset named {name!r}; GET /v1/presets lists them")
    return submit_sweep(preset.sweep(scale), idempotency_key, session, owner, settings, broker)


def submit_sweep(
    spec: SweepSpec, idempotency_key: str | None, session, owner: str, settings: Settings, broker: Broker
) -> Submitted[models.Sweep]:
    """Validate, count, store once, publish (module docstring); or answer the sweep its Idempotency-Key made."""
    key = check_key(idempotency_key)
    _check_grid_size(spec, settings)
    base = _named_grid_error(lambda: sweep_base(with_sweep_tags(spec)))
    document = sweep_document(spec, base)
    request_hash, size = _fingerprint(document)
    if key is not None and (first := sweeps_repo.find_by_idempotency_key(session, owner, key)) is not None:
        return _replayed_sweep(first, request_hash, key)
    budget = _ByteBudget(settings.max_sweep_bytes)
    budget.add(size, "base", "the sweep's spec")
    jobs = _named_grid_error(lambda: list(_new_jobs(spec, base, request_hash, session, owner, settings, budget)))
    try:
        with quota.reserve(session, owner, len(jobs), settings), violations_raised(session):
            hold_uploads(session, owner, [job.spec for job in jobs])
            sweep, job_ids = sweeps_repo.create_sweep(
                session, owner=owner, spec=document, idempotency_key=key, request_hash=request_hash, jobs=jobs
            )
            session.commit()
    except (ConstraintViolation, ProblemError):
        session.rollback()
        first = sweeps_repo.find_by_idempotency_key(session, owner, key) if key is not None else None
        if first is None:
            raise
        return _replayed_sweep(first, request_hash, key)
    try:
        broker.enqueue_group(job_ids)
    except Exception as error:
        log.warning("sweep %s stored but not published yet (the reaper retries): %s", sweep.id, error)
    return Submitted(sweep)


def hold_uploads(session, owner: str, documents: list[dict]) -> None:
    """Hold the uploads these job specs name until the jobs are committed (uploads_repo.hold_for_jobs), in the
    transaction that inserts them; one deleted since resolve_uploads looked it up is the 422 an unknown id gets."""
    missing = uploads_repo.hold_for_jobs(session, owner, documents)
    if not missing:
        return
    session.rollback()
    errors = [
        FieldError(
            field=field,
            message=f"no {'data set' if field == 'data.id' else 'model'} {upload_id} (or not yours)",
            value=upload_id,
        )
        for field, upload_id in missing
    ]
    raise ProblemError(422, summarize(errors), type=types.VALIDATION, title="Request failed validation", errors=errors)


def with_sweep_tags(spec: SweepSpec) -> dict:
    """The base spec with the sweep's tags added, so every job carries (and is filtered by) them."""
    tags = spec.base.get("tags", [])
    if not spec.tags or not isinstance(tags, list):
        return spec.base
    return {**spec.base, "tags": list(dict.fromkeys([*tags, *spec.tags]))}


def sweep_document(spec: SweepSpec, base: SweepBase) -> dict[str, Any]:
    """What the sweep row stores: the sweep as sent, with its base written out canonically."""
    sent = spec.model_dump(mode="json", exclude={"base"})
    return {field: base.document if field == "base" else sent[field] for field in SweepSpec.model_fields}


def _replayed_job(first: models.Job, digest_: str, key: str) -> Submitted[models.Job]:
    if first.spec_hash != digest_:
        raise refuse_reuse(key, first.id)
    return Submitted(first, replayed=True)


def _replayed_sweep(first: models.Sweep, request_hash: str, key: str) -> Submitted[models.Sweep]:
    if first.request_hash != request_hash:
        raise refuse_reuse(key, first.id)
    return Submitted(first, replayed=True)


def _fingerprint(document: dict[str, Any]) -> tuple[str, int]:
    """The request hash of a sweep document (service/idempotency.py) and its size as compact JSON."""
    encoded = compact_json(document)
    return digest(encoded), len(encoded)


def _new_jobs(
    spec: SweepSpec, base: SweepBase, request_hash: str, session, owner: str, settings: Settings, budget: _ByteBudget
) -> Iterator[NewJob]:
    """One NewJob per grid point, made one at a time: uploads resolved, caps checked and estimated, its patch counted."""
    for point in grid_points(base, spec.grid):
        job_spec = resolve_uploads(point.spec, session, owner)
        checked = _checked_point(point, job_spec, settings)
        document = point_document(job_spec, base)
        patch = patch_between(base.document, document)
        budget.add(len(compact_json(patch)), "grid", f"grid point {point.values}")
        yield NewJob(
            document,
            patch,
            sweep_job_hash(request_hash, patch),
            checked.parameters,
            estimate_document(checked.estimate),
        )


class _ByteBudget:
    """The bytes a sweep will store (compact JSON), refused with a 422 the moment they pass max_sweep_bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0

    def add(self, size: int, field: str, what: str) -> None:
        self.total += size
        if self.total > self.limit:
            message = (
                f"the sweep would store more than {self.limit} bytes of spec (its base once, then each "
                f"job's patch): {self.total} by {what}; the cap is {self.limit} (setting max_sweep_bytes)"
            )
            raise ProblemError(
                422,
                message,
                type=types.RESOURCE_CAP,
                title="Request exceeds a resource cap",
                errors=[FieldError(field=field, message=message, limit=self.limit, value=self.total)],
            )


def _check_grid_size(spec: SweepSpec, settings: Settings) -> None:
    size = grid_size(spec.grid)
    if size > settings.max_sweep_jobs:
        message = f"the grid has {size} points; the cap is {settings.max_sweep_jobs} (setting max_sweep_jobs)"
        raise ProblemError(
            422,
            message,
            type=types.RESOURCE_CAP,
            title="Request exceeds a resource cap",
            errors=[FieldError(field="grid", message=message, limit=settings.max_sweep_jobs, value=size)],
        )


def _named_grid_error(make):
    """make(), with a GridError turned into a 422 naming its field."""
    try:
        return make()
    except GridError as error:
        raise ProblemError(
            422,
            str(error),
            type=types.VALIDATION,
            title="Request failed validation",
            errors=[FieldError(field=error.field, message=error.reason)],
        ) from None


def _checked_point(point: GridPoint, job_spec: JobSpec, settings: Settings) -> CheckedSpec:
    try:
        return checked_spec(job_spec, settings)
    except ProblemError as error:
        error.problem = error.problem.model_copy(
            update={"detail": f"grid point {point.values}: {error.problem.detail}"}
        )
        raise

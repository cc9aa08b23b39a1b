"""`ntklab.run_job(job_id)`: claim the row, run the engine, write what it reports, store the outcome.

The task is idempotent. The message is a wake-up token: the worker claims the fairly-next
queued job across owners (often the one named), with a conditional UPDATE (queued → running,
attempts + 1) that only one worker wins; when nothing is queued (a duplicate delivery, a
cancelled job) the task returns without writing. A new attempt wipes the previous attempt's metric chunks and
artifacts; the engine is deterministic given the spec's seed, so the retried series has
every step exactly once. torch is imported in the worker's child process only.

Memory: before running, the job's estimated peak memory (planner/estimate.py, stored at submission) is checked
against the device's (worker_memory_budget_bytes, else the GPU's or the machine's memory); a job
over it fails at once with both numbers (`exceeds_device_memory`). A CPU pool process is limited to
its size after importing torch and running the warm-up job plus worker_memory_limit_bytes
(RLIMIT_DATA), so a job that still outgrows its memory gets a MemoryError, not the kernel's OOM
killer: it fails on its first attempt as `out_of_memory` with the size that failed, and the same
process takes the next job.

Time limits: at `job_time_limit_s` Celery raises SoftTimeLimitExceeded in the task, which
fails the job. A job stuck where Python cannot raise (inside one long native call) is
killed `job_time_limit_grace_s` later by the hard limit; the worker's parent process then
calls `JobTask.on_failure`, which fails the row this worker node was running (one job per
node: worker_concurrency = 1), so the reaper does not take the dead attempt for a lost
worker and run it again.

Cancel: the engine stops at its next checkpoint (engine/callbacks.py) once the heartbeat
thread has seen `cancel_requested`. A job still running `job_cancel_grace_s` later is stuck where
no checkpoint comes (one long native call): the heartbeat thread stores it `cancelled` with the
points it has, then kills its own pool process with SIGKILL, and the worker's parent forks a fresh
one, as after the hard time limit (`abandon_process`). The message, acked late, is redelivered and
finds nothing queued.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import signal
import socket
import time
from functools import partial
from pathlib import Path

import billiard
from celery import Celery, Task
from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from celery.signals import celeryd_after_setup, worker_process_init
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from ntklab.api_schemas.spec import JobSpec
from ntklab.config.settings import Settings
from ntklab.engine.callbacks import JobCancelled
from ntklab.planner.estimate import Estimate, estimate_job, format_bytes
from ntklab.store.db import make_engine, make_session_factory
from ntklab.store.job_store import ChunkRow, Claim, JobStore, LostJob, MissingUpload
from ntklab.workers.celery_app import TASK_NAME
from ntklab.workers.heartbeat import MAX_CHUNK_POINTS, JobReporter, SeriesBuffer

log = logging.getLogger(__name__)


def register(app: Celery, settings: Settings) -> Task:
    """Add the job task to `app`, bound to `settings`, and the worker's process signals."""
    worker_process_init.connect(partial(_prepare_child, settings), weak=False, dispatch_uid="ntklab.import_engine")
    celeryd_after_setup.connect(_remember_node, weak=False, dispatch_uid="ntklab.remember_node")
    return app.task(name=TASK_NAME, bind=True, base=JobTask, settings=settings)(run_job)


def _prepare_child(settings: Settings, **_) -> None:
    """Pay torch's import when the child starts, not when the first job arrives (torch._dynamo too,
    which torch imports on the first optimizer or dispatch mode a job builds: ~0.8 s on the CPU); set
    its threads (settings.worker_threads, resolved by workers/main.py); run a tiny job on its device
    (engine/run.py, warm_up), so the first job pays no start-up cost; then limit its memory."""
    import torch
    import torch._dynamo  # noqa: F401

    if billiard.current_process().name != "MainProcess":  # a prefork child, not a solo pool's worker itself
        POOL_PROCESS["pid"] = os.getpid()

    if settings.worker_threads > 0:
        torch.set_num_threads(settings.worker_threads)

    device = worker_device("auto")
    warmed = _warmed_up(device.split(" ")[0])
    if settings.worker_memory_limit_bytes and device == "cpu":
        limit = limit_memory(settings.worker_memory_limit_bytes)
        log.info("worker process memory limited to %s (RLIMIT_DATA)", format_bytes(limit))
    log.info(
        "worker process ready: engine imported and %s, device %s, %d torch threads",
        warmed,
        device,
        torch.get_num_threads(),
    )


def _warmed_up(device: str) -> str:
    """Run the warm-up job on `device`; what the ready line says of it. A failed warm-up is logged, not fatal: the
    worker still takes jobs (each fails or succeeds on its own), only the first one pays torch's start-up."""
    from ntklab.engine.run import warm_up

    try:
        return f"warmed up by a tiny job in {warm_up(device):.2f} s"
    except Exception:
        log.exception("the warm-up job failed on %s", device)
        return "not warmed up (the warm-up job failed)"


def limit_memory(extra_bytes: int) -> int:
    """Set this process's RLIMIT_DATA (soft) to its data size now plus `extra_bytes`; returns the limit.

    RLIMIT_DATA bounds the private writable memory (heap and anonymous mappings, where tensors and
    arrays live) and, unlike RLIMIT_AS, not the address space reserved without being writable
    (per-thread malloc arenas, library mappings), so it tracks what a job can really fill.
    """
    status = Path("/proc/self/status").read_text().splitlines()
    data_kib = next(int(line.split()[1]) for line in status if line.startswith("VmData:"))
    limit = data_kib * 1024 + extra_bytes
    resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    return limit


POOL_PROCESS: dict[str, int] = {}
"""This process's pid when it is a prefork pool process (set at its start): the one a stuck cancel may kill."""

NODE: dict[str, str] = {}
"""This worker's node name (`-n`, e.g. w0@host), as the parent process knows it."""


def _remember_node(sender: str, **_) -> None:
    NODE["name"] = sender


def time_limit_error(settings: Settings, *, killed: bool) -> dict:
    message = f"time limit of {settings.job_time_limit_s} s exceeded"
    if killed:
        message += f"; the job did not stop within {settings.job_time_limit_grace_s} s more, so its process was killed"
    return {"type": "TimeLimit", "message": message}


class JobTask(Task):
    """The job task's class: `settings` is set by `register`; sessions are made in the process that runs."""

    settings: Settings
    _sessions: sessionmaker[Session] | None = None

    @property
    def sessions(self) -> sessionmaker[Session]:
        """Sessions of this (pool) process, made on first use: an engine never crosses a fork."""
        if self._sessions is None:
            self._sessions = make_session_factory(make_engine(self.settings.database_url))
        return self._sessions

    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """Called in the parent process after the hard time limit killed the pool process."""
        if isinstance(exc, TimeLimitExceeded) and "name" in NODE:
            settings = self.settings
            engine = make_engine(settings.database_url)  # its own, disposed: the parent forks new pool processes
            try:
                failed = JobStore(make_session_factory(engine)).fail_running_on(
                    NODE["name"], time_limit_error(settings, killed=True)
                )
            finally:
                engine.dispose()
            log.error("hard time limit: jobs %s failed", failed)


def run_job(self: JobTask, job_id: str) -> None:
    """Run the fairly-next queued job; the message's `job_id` is a hint (see store/fairness.py)."""
    settings = self.settings
    store = JobStore(self.sessions)
    worker = self.request.hostname or socket.gethostname()
    claim = store.claim_next(job_id, worker=worker, device_for=lambda spec: worker_device(spec.get("device", "auto")))
    if claim is None:
        log.info("message for job %s: no queued job to take (duplicate delivery, cancelled or taken)", job_id)
        return
    if claim.job_id != job_id:
        log.info("message for job %s took job %s, the fairly-next one", job_id, claim.job_id)
    try:
        execute(store, claim, settings, claim.device)
    except LostJob:
        log.warning("job %s attempt %d: another worker owns the row; result dropped", claim.job_id, claim.attempt)


def execute(store: JobStore, claim: Claim, settings: Settings, device: str) -> None:
    try:
        spec = JobSpec.model_validate(claim.spec)
    except ValidationError as error:
        store.finish(claim, "failed", error={"type": "InvalidSpec", "message": str(error)})
        return
    too_large = device_refusal(spec, claim.estimate, settings, device)
    if too_large is not None:
        store.finish(claim, "failed", error=too_large)
        return
    try:
        uploaded = read_uploads(store, claim.job_id, spec)
    except MissingUpload as error:
        store.finish(claim, "failed", error={"type": "UploadMissing", "message": str(error)})
        return
    except Exception as error:
        log.exception("job %s: its uploads could not be read", claim.job_id)
        store.finish(claim, "failed", error=describe_failure(error))
        return
    from ntklab.engine.run import run

    reporter = JobReporter(
        store,
        claim,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        flush_interval_s=settings.metrics_flush_interval_s,
        cancel_grace_s=settings.job_cancel_grace_s,
        overdue=lambda: abandon_process(store, claim, reporter),
    )
    result = None
    with reporter:
        try:
            result = run(spec, reporter, device=device.split(" ")[0], uploads=uploaded)
            status, error = "succeeded", None
        except JobCancelled:
            status, error = "cancelled", None
        except SoftTimeLimitExceeded:
            status, error = "failed", time_limit_error(settings, killed=False)
        except Exception as exc:
            log.exception("job %s failed", claim.job_id)
            status, error = "failed", describe_failure(exc)
    if reporter.lost:
        raise LostJob(claim.job_id)
    storing = time.perf_counter()
    rows, replace = final_rows(reporter.series, result.series if result else {})
    summary, artifacts = (None, {}) if result is None else stored_outcome(result, settings.max_artifact_bytes)
    timed_summary = None if summary is None else partial(with_storage_time, summary, time.perf_counter() - storing)
    warnings = None if result is None else [warning.model_dump(mode="json") for warning in result.warnings]
    store.finish(
        claim,
        status,
        summary=timed_summary,
        warnings=warnings,
        error=error,
        chunks=rows,
        replace_series=replace,
        artifacts=artifacts,
        progress=reporter.last_progress(),
        max_stored_bytes=settings.max_stored_bytes_per_key,
    )


def abandon_process(store: JobStore, claim: Claim, reporter: JobReporter) -> None:
    """The cancelled job did not stop in time: store it cancelled with its last progress and points, then
    SIGKILL this pool process (the engine is stuck in it); the worker's parent replaces it. If the row
    cannot be written, the reaper finds its heartbeat stale and, the cancel asked, ends it cancelled.
    A process that is not a prefork pool process (a solo pool, a test calling `execute`) is not killed:
    the engine runs on until it returns, and its result is dropped (the row is no longer running)."""
    try:
        store.finish(claim, "cancelled", chunks=reporter.series.take(), progress=reporter.last_progress())
        log.error(
            "job %s cancelled; its pool process %d is killed, the worker starts a fresh one", claim.job_id, os.getpid()
        )
    except LostJob:
        log.error("job %s: another worker owns the row; killing pool process %d", claim.job_id, os.getpid())
    except Exception:
        log.exception(
            "job %s: storing the cancel failed; killing pool process %d, the reaper ends the row",
            claim.job_id,
            os.getpid(),
        )
    if POOL_PROCESS.get("pid") != os.getpid():
        log.error("job %s: process %d is not a pool process; not killed", claim.job_id, os.getpid())
        return
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def with_storage_time(summary: dict, prepared_s: float, written_s: float) -> dict:
    """The summary with the worker's part of storing (preparing the rows, then writing them) added to
    timings.storage and to wall_time_s; the engine timed its own part (serialising the artifacts)."""
    seconds = prepared_s + written_s
    timings = summary.get("timings")
    if not isinstance(timings, dict):
        return summary
    wall = summary.get("wall_time_s")
    return summary | {
        "timings": timings | {"storage": round(timings.get("storage", 0.0) + seconds, 4)},
        "wall_time_s": wall + seconds if isinstance(wall, (int, float)) else wall,
    }


def read_uploads(store: JobStore, job_id: str, spec: JobSpec):
    """The data set and ONNX model the spec names, read from the database and decoded for the engine."""
    from ntklab.api_schemas.spec import DatasetData
    from ntklab.engine.uploads import Uploads, load_npy

    dataset_ids = (spec.data.id,) if isinstance(spec.data, DatasetData) else ()
    model_ids = (spec.model.id,) if spec.model.kind == "onnx" and spec.model.id else ()
    if not dataset_ids and not model_ids:
        return Uploads()
    stored = store.read_uploads(job_id, dataset_ids, model_ids)
    arrays = {key: (load_npy(x), load_npy(y)) for key, (x, y) in stored.datasets.items()}
    return Uploads(datasets=arrays, models=stored.models)


def worker_device(wanted: str) -> str:
    """'cuda:0 <GPU name>' when the spec allows CUDA and this worker has it, else 'cpu'."""
    import torch

    if wanted != "cpu" and torch.cuda.is_available():
        return f"cuda:0 {torch.cuda.get_device_name(0)}"[:64]
    return "cpu"


def device_memory(device: str, settings: Settings) -> tuple[int, str]:
    """The bytes a job may use on `device` and where the number comes from."""
    if settings.worker_memory_budget_bytes:
        return settings.worker_memory_budget_bytes, "this worker's budget (setting worker_memory_budget_bytes)"
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_properties(0).total_memory, f"the memory of {device}"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's physical memory"


def device_refusal(spec: JobSpec, stored: Estimate | None, settings: Settings, device: str) -> dict | None:
    """The job's error if its estimated peak memory exceeds the device's, else None (also when it cannot be estimated).

    The estimate is the one stored at submission (store/job_estimates.py); only a job stored before migration
    0015 has none, and is estimated here from its spec."""
    try:
        estimate = stored or estimate_job(spec)
    except ValueError:
        return None
    available, source = device_memory(device, settings)
    if estimate.memory_bytes <= available:
        return None
    largest = estimate.memory_dominant
    return {
        "type": "ExceedsDeviceMemory",
        "code": "exceeds_device_memory",
        "message": f"not started: the estimated peak memory {format_bytes(estimate.memory_bytes)} exceeds "
        f"{format_bytes(available)}, {source}; the largest term is {largest.name}, "
        f"{format_bytes(largest.value)}: {largest.what}",
        "estimate_bytes": estimate.memory_bytes,
        "device_bytes": available,
    }


def describe_failure(exc: BaseException) -> dict:
    if is_out_of_memory(exc):
        _release_gpu_memory()
        message = f"out of memory: {exc}"
        return {
            "type": "OutOfMemory",
            "code": "out_of_memory",
            "message": message,
            "requested_bytes": requested_bytes(message),
        }
    return {"type": type(exc).__name__, "message": str(exc) or repr(exc)}


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
EXACT = re.compile(r"allocate (\d+) bytes")
ROUNDED = re.compile(r"allocate ([\d.]+) ?(PiB|TiB|GiB|MiB|KiB|B)\b")


def requested_bytes(message: str) -> int | None:
    """The allocation an out-of-memory message names: torch's CPU allocator gives bytes ("tried to
    allocate 274877906944 bytes"), CUDA's and numpy's a rounded size ("Tried to allocate 40.00 GiB",
    "Unable to allocate 74.5 GiB"); None when it names none."""
    if exact := EXACT.search(message):
        return int(exact.group(1))
    if rounded := ROUNDED.search(message):
        return int(float(rounded.group(1)) * UNITS[rounded.group(2)])
    return None


def is_out_of_memory(exc: BaseException) -> bool:
    import torch

    text = str(exc).lower()
    return (
        isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError))
        or "out of memory" in text
        or "can't allocate memory" in text
    )


def _release_gpu_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def final_rows(buffer: SeriesBuffer, series: dict) -> tuple[list[ChunkRow], tuple[str, ...]]:
    """The chunks still to write: buffered points, then each final series' points after what was streamed.

    If a series in the result does not extend what was streamed (the engine recomputed it),
    its streamed chunks are replaced by the result's series from chunk 0.
    """
    rows = buffer.take()
    replace = []
    for name, final in series.items():
        written = buffer.written_steps.get(name, [])
        if final.steps[: len(written)] == written:
            start, chunk = len(written), buffer.next_chunk.get(name, 0)
        else:
            replace.append(name)
            rows = [row for row in rows if row.name != name]
            start, chunk = 0, 0
        for offset in range(start, len(final.steps), MAX_CHUNK_POINTS):
            end = offset + MAX_CHUNK_POINTS
            rows.append(ChunkRow(name, chunk, list(final.steps[offset:end]), list(final.values[offset:end])))
            chunk += 1
    return rows, tuple(replace)


def stored_outcome(result, max_artifact_bytes: int) -> tuple[dict, dict[str, tuple[str, bytes]]]:
    """The summary and the artifacts under the size cap; a skipped artifact is named in the summary."""
    from ntklab.engine.result import finite_or_none

    summary = {name: finite_or_none(value) for name, value in result.summary.items()}
    artifacts, skipped = {}, []
    for name, artifact in result.artifacts.items():
        if len(artifact.data) > max_artifact_bytes:
            skipped.append(f"{name} ({len(artifact.data)} bytes > cap {max_artifact_bytes})")
        else:
            artifacts[name] = (artifact.media_type, artifact.data)
    if skipped:
        summary["artifacts_skipped"] = "; ".join(skipped)
    return summary, artifacts

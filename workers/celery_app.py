"""The Celery application: one broker from the settings, late acks, one job per worker process.

`filesystem://` (the embedded default) keeps messages as files under `settings.broker_dir`,
polled every 0.02 s (a job waits ~10 ms for its worker; an idle worker spends ~1 % of a core)
through workers/filesystem_transport.py (an idle worker stops within a fraction of a second);
`redis://` is the full stack, with a visibility timeout longer than the longest allowed job so
Redis never hands a running job to a second worker.
Nothing here imports torch (the worker's parent process never touches CUDA), and nothing is
built at import time: `make_celery(settings)` is called by the app factory and the worker entry.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from celery import Celery

from ntklab.config.settings import Settings
from ntklab.workers.filesystem_transport import Transport as FilesystemTransport

TASK_NAME = "ntklab.run_job"
FILESYSTEM_POLL_S = 0.02
CHILD_START_TIMEOUT_S = 120
STALE_PART_S = 3600
"""Age past which a queue folder's `<message>.part` is a dead producer's half-written message (a write takes ms)."""


def filesystem_broker_options(broker_dir: Path) -> dict:
    """Folders of the filesystem transport (created here, stale partial messages swept); producer and consumer
    share `queue/`."""
    root = broker_dir.resolve()
    folders = {"data_folder_in": root / "queue", "data_folder_out": root / "queue", "control_folder": root / "control"}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    sweep_stale_parts(root / "queue")
    return {name: str(folder) for name, folder in folders.items()} | {"polling_interval": FILESYSTEM_POLL_S}


def sweep_stale_parts(queue: Path) -> None:
    """Removes the `.part` files (filesystem_transport.py: a message while it is written) older than STALE_PART_S,
    which a producer killed mid-write left behind: never renamed, so never consumed."""
    cutoff = time.time() - STALE_PART_S
    for part in queue.glob("*.part"):
        with contextlib.suppress(FileNotFoundError):  # a live producer renamed it meanwhile
            if part.stat().st_mtime < cutoff:
                part.unlink()


def broker_transport_options(settings: Settings) -> dict:
    if settings.broker_url.startswith("filesystem://"):
        return filesystem_broker_options(settings.broker_dir)
    return {"visibility_timeout": settings.job_time_limit_s + 2 * settings.job_time_limit_grace_s}


def make_celery(settings: Settings) -> Celery:
    """A Celery app configured from `settings`, with no task registered: enough to publish jobs
    (the API). The worker adds the job task with `ntklab.workers.tasks.register` (see workers/main.py)."""
    app = Celery("ntklab", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        broker_transport=FilesystemTransport if settings.broker_url.startswith("filesystem://") else None,
        broker_transport_options=broker_transport_options(settings),
        broker_connection_retry_on_startup=True,
        task_default_queue=settings.queue,
        task_routes={TASK_NAME: {"queue": settings.queue}},
        task_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        worker_prefetch_multiplier=1,
        worker_pool="prefork",
        worker_concurrency=1,
        worker_proc_alive_timeout=CHILD_START_TIMEOUT_S,
        task_soft_time_limit=settings.job_time_limit_s,
        task_time_limit=settings.job_time_limit_s + settings.job_time_limit_grace_s,
        worker_send_task_events=False,
        worker_hijack_root_logger=False,
    )
    return app

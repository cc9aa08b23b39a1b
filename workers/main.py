"""The worker's entry point: one `Settings` → one Celery app with the job task → `celery worker`.

    python -m ntklab.workers [celery worker options]      (also `ntklab worker`)

runs one worker node on `settings.queue` with one pool process (one job at a time per
GPU); options such as `-n gpu0@%h` or `--loglevel=DEBUG` are passed to Celery. The pool
process runs torch on `worker_threads` intra-op threads (workers/threads.py: the setting, else
OMP_NUM_THREADS, else the cores this worker owns), exported as OMP_NUM_THREADS and
MKL_NUM_THREADS before the pool process imports torch, and set again there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from celery import Celery

from ntklab.config.settings import Settings
from ntklab.workers import tasks
from ntklab.workers.celery_app import make_celery
from ntklab.workers.threads import worker_threads


def worker_app(settings: Settings) -> Celery:
    """The Celery app of `settings` with the job task registered."""
    app = make_celery(settings)
    tasks.register(app, settings)
    return app


def worker_argv(settings: Settings, extra: Sequence[str]) -> list[str]:
    """`celery worker` arguments: one pool process on the settings' queue, then the caller's options."""
    return ["worker", "--concurrency=1", "-Q", settings.queue, "--loglevel=INFO", *extra]


def with_threads(settings: Settings) -> Settings:
    """The settings with worker_threads resolved (never 0), exported for the torch the pool process imports."""
    threads = worker_threads(settings.worker_threads)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    return settings.model_copy(update={"worker_threads": threads})


def main(argv: Sequence[str] | None = None) -> None:
    settings = with_threads(Settings())
    worker_app(settings).worker_main(worker_argv(settings, sys.argv[1:] if argv is None else argv))

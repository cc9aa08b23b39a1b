"""What the service needs from the broker: send a job, is the broker up, how many are waiting.

This module is the API's only door into `workers` (an import-linter contract says so): it
publishes task messages by name and never imports the task, the engine or torch.
"""

from __future__ import annotations

import logging

from celery import Celery, group

from ntklab.config.settings import Settings
from ntklab.workers.celery_app import TASK_NAME, make_celery

log = logging.getLogger(__name__)

PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0.0, "interval_step": 0.2, "interval_max": 0.5}
PROBE_TIMEOUT_S = 2.0


class Broker:
    """The job queue of one Celery app."""

    def __init__(self, celery: Celery):
        self.celery = celery
        self.queue = celery.conf.task_default_queue

    def enqueue(self, job_id: str) -> None:
        """Publish one `ntklab.run_job(job_id)` message; raises when the broker stays unreachable.

        A job whose message is lost (or never sent) stays `queued` in SQL and the reaper
        publishes it again, so callers may log the error and answer 202 anyway.
        """
        self.celery.send_task(TASK_NAME, args=[job_id], queue=self.queue, retry=True, retry_policy=PUBLISH_RETRY)

    def enqueue_group(self, job_ids: list[str]) -> None:
        """Publish a sweep's jobs as one Celery group (one message per job; completion is read from SQL)."""
        signatures = [self.celery.signature(TASK_NAME, args=[job_id], queue=self.queue) for job_id in job_ids]
        group(signatures).apply_async(retry=True, retry_policy=PUBLISH_RETRY)

    def ok(self) -> bool:
        return self.depth() is not None

    def depth(self) -> int | None:
        """Messages waiting in the job queue (not counting the ones workers hold); None if unreachable."""
        try:
            with self.celery.connection_for_read() as connection:
                connection.ensure_connection(max_retries=1, timeout=PROBE_TIMEOUT_S)
                declared = connection.default_channel.queue_declare(queue=self.queue, passive=False)
            return int(declared.message_count)
        except Exception as error:  # any transport error means "not reachable"
            log.warning("broker not reachable: %s", error)
            return None


def make_broker(settings: Settings) -> Broker:
    """The broker of `settings` (filesystem:// or redis://), ready to publish to `settings.queue`."""
    return Broker(make_celery(settings))

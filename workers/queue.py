"""What the service needs from the broker: send a job, is the broker up, how many are waiting."""

from __future__ import annotations

import logging

from workers.celery_app import TASK_NAME, app

log = logging.getLogger(__name__)

PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0.0, "interval_step": 0.2, "interval_max": 0.5}
PROBE_TIMEOUT_S = 2.0


def enqueue_job(job_id: str) -> None:
    """Publish one `ntklab.run_job(job_id)` message; raises when the broker stays unreachable.

    A job whose message is lost (or never sent) stays `queued` in SQL and the reaper
    publishes it again, so callers may log the error and answer 202 anyway.
    """
    app.send_task(TASK_NAME, args=[job_id], queue=app.conf.task_default_queue, retry=True, retry_policy=PUBLISH_RETRY)


def broker_ok() -> bool:
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=PROBE_TIMEOUT_S)
            connection.default_channel.queue_declare(queue=app.conf.task_default_queue, passive=False)
        return True
    except Exception as error:  # any transport error means "not ready"
        log.warning("broker not reachable: %s", error)
        return False


def queue_depth() -> int | None:
    """Messages waiting in the job queue (not counting the ones workers hold); None if unknown."""
    try:
        with app.connection_for_read() as connection:
            connection.ensure_connection(max_retries=1, timeout=PROBE_TIMEOUT_S)
            declared = connection.default_channel.queue_declare(queue=app.conf.task_default_queue, passive=False)
        return int(declared.message_count)
    except Exception as error:
        log.warning("queue depth unknown: %s", error)
        return None

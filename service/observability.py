"""Prometheus metrics of one app: request latency by route template, jobs by status, queue depth.

Each app owns a registry (several apps may live in one test process). Jobs and queue depth
are read when /metrics is scraped, so they are never stale; a scrape during a database or
broker outage leaves those samples out instead of failing.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from ntklab.store import jobs_repo
from ntklab.store.models import JOB_STATUSES
from ntklab.workers.queue import Broker

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UNMATCHED_ROUTE = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class JobsCollector:
    def __init__(self, sessions: sessionmaker[Session], broker: Broker) -> None:
        self.sessions = sessions
        self.broker = broker

    def collect(self):
        jobs = GaugeMetricFamily("ntklab_jobs", "Jobs in the database by status", labels=["status"])
        try:
            with self.sessions() as session:
                counts = jobs_repo.count_by_status(session)
        except SQLAlchemyError as error:
            log.warning("jobs gauge skipped: %s", error)
        else:
            for status in JOB_STATUSES:
                jobs.add_metric([status], counts.get(status, 0))
        yield jobs
        depth = GaugeMetricFamily("ntklab_queue_depth", "Job messages waiting in the broker queue")
        waiting = self.broker.depth()
        if waiting is not None:
            depth.add_metric([], waiting)
        yield depth


def make_registry(sessions: sessionmaker[Session], broker: Broker) -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry()
    latency = Histogram(
        "ntklab_http_request_duration_seconds",
        "HTTP request latency by method, route template and status",
        ["method", "route", "status"],
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    registry.register(JobsCollector(sessions, broker))
    return registry, latency


class RequestLatency:
    """ASGI middleware observing every HTTP request's duration under its route template (/v1/jobs/{job_id})."""

    def __init__(self, app, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_noting_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            route = getattr(scope.get("route"), "path", UNMATCHED_ROUTE)
            method = scope["method"] if scope["method"] in METHODS else "OTHER"
            self.histogram.labels(method, route, str(status)).observe(time.perf_counter() - started)

"""client.jobs.metrics(since_step=) and client.jobs.updates (sync and async) against the real service app on SQLite.

The job is claimed and its series written the way a worker writes them (tests/worker_writes.py), flushes
ending anywhere, even between two series of one step. The reference is the list of points written, filtered
here by step.
"""

from __future__ import annotations

import asyncio
import math

import httpx
import numpy as np
import pytest

from ntklab import errors
from ntklab.client import AsyncClient
from ntklab.resources import Job, JobUpdate, MetricSeries
from tests.worker_writes import claimed_by_a_worker

SMALL = {"model": {"hidden": [8]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}}
SERIES_AT = {"loss": 1, "delta_k": 5}  # recorded every step / every 5th step, in this order within a step
POINTS = [
    (name, step, None if (name, step) == ("loss", 7) else 1.0 / (1 + step) + len(name))
    for step in range(40)
    for name, every in SERIES_AT.items()
    if step % every == 0
]  # 48 points; loss at step 7 was not finite (stored null, read back NaN)


def after(points, since: int | None, names=tuple(SERIES_AT)) -> dict[str, tuple[list[int], list[float]]]:
    """{name: (steps, values)} of the points with a step greater than `since`; a series without any left out."""
    kept: dict[str, tuple[list[int], list[float]]] = {}
    for name, step, value in points:
        if name in names and (since is None or step > since):
            steps, values = kept.setdefault(name, ([], []))
            steps.append(step)
            values.append(math.nan if value is None else value)
    return kept


def assert_series(got: dict[str, MetricSeries], want: dict[str, tuple[list[int], list[float]]]) -> None:
    assert sorted(got) == sorted(want)
    for name, (steps, values) in want.items():
        assert got[name].step.dtype == np.int64 and got[name].value.dtype == np.float64
        np.testing.assert_array_equal(got[name].step, steps)
        np.testing.assert_array_equal(got[name].value, values)  # NaN where NaN


SINCE = (None, 0, 4, 5, 6, 7, 20, 35, 38, 39, 1000)


def test_metrics_and_updates_since_a_step_are_the_later_points(client, app):
    job = client.jobs.create(SMALL)
    flush = claimed_by_a_worker(app, job.id)
    for start in range(0, len(POINTS), 17):  # 17 points a flush: a flush can end inside a step
        flush(POINTS[start : start + 17])
    for since in SINCE:
        assert_series(client.jobs.metrics(job, since_step=since), after(POINTS, since))
        update = client.jobs.updates(job.id, since_step=since)
        assert isinstance(update, JobUpdate) and isinstance(update.job, Job)
        assert (update.since_step, update.job.id, update.job.status) == (since, job.id, "running")
        assert update.job.spec is None and update.job.progress.step == 39 and not update.job.finished
        assert_series(update.series(), after(POINTS, since))
        assert {name: series.step for name, series in update.metrics.items()} == {
            name: steps for name, (steps, _) in after(POINTS, since).items()
        }
    assert_series(client.jobs.metrics(job, "delta_k", since_step=30), after(POINTS, 30, names=("delta_k",)))
    assert_series(client.jobs.updates(job, ["delta_k"], since_step=30).series(), after(POINTS, 30, names=("delta_k",)))
    with pytest.raises(errors.UnprocessableEntityError):
        client.jobs.updates(job, since_step=-1)


def test_following_a_job_as_docs_sdk_md_says_ends_with_every_point(client, app):
    """Ask from one step before the last step held; per series keep the points past its own last step."""
    job = client.jobs.create(SMALL)
    flush = claimed_by_a_worker(app, job.id)
    held: dict[str, MetricSeries] = {}
    cuts = [0, 1, 3, 4, 11, 12, 13, 30, 31, len(POINTS)]  # flushes ending between the two series of a step, too
    for lo, hi in zip(cuts, cuts[1:]):
        flush(POINTS[lo:hi])
        last = max((int(series.step[-1]) for series in held.values()), default=0)
        update = client.jobs.updates(job, since_step=last - 1 if last >= 1 else None)
        for name, new in update.series().items():
            mine = held.get(name, MetricSeries(new.step[:0], new.value[:0]))
            fresh = new.step > (mine.step[-1] if len(mine.step) else -1)
            held[name] = MetricSeries(
                np.concatenate([mine.step, new.step[fresh]]), np.concatenate([mine.value, new.value[fresh]])
            )
        assert_series(held, after(POINTS[:hi], None))


def test_the_async_twins(app):
    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with AsyncClient(
            base_url="http://testserver", http_client=httpx.AsyncClient(transport=transport), max_retries=0
        ) as sdk:
            job = await sdk.jobs.create(SMALL)
            claimed_by_a_worker(app, job.id)(POINTS)
            for since in SINCE:
                assert_series(await sdk.jobs.metrics(job.id, since_step=since), after(POINTS, since))
                update = await sdk.jobs.updates(job, since_step=since)
                assert isinstance(update.job, Job) and (update.since_step, update.job.id) == (since, job.id)
                assert_series(update.series(), after(POINTS, since))
            some = await sdk.jobs.updates(job, "delta_k", since_step=30)
            assert_series(some.series(), after(POINTS, 30, names=("delta_k",)))

    asyncio.run(scenario())

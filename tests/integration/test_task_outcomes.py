"""The task body in-process on a migrated SQLite database: how each outcome is stored."""

from __future__ import annotations

import uuid

import pytest
import torch
from sqlalchemy import select

from ntklab.config.settings import Settings
from ntklab.engine.result import Series
from ntklab.store.db import make_engine, make_session_factory
from ntklab.store.job_store import JobStore
from ntklab.store.models import Artifact, Job, MetricChunk
from ntklab.workers.heartbeat import SeriesBuffer
from ntklab.workers.tasks import describe_failure, execute, final_rows

TINY = {
    "seed": 0,
    "model": {"hidden": [16]},
    "data": {"kind": "gaussian_mixture", "n_train": 6, "input_dim": 3, "classes": 2, "probe": {"n": 3}},
    "training": {"max_steps": 12, "target_loss": None, "lr": 0.1},
    "diagnostics": {"kernel": {"schedule": "every", "every": 4}, "hessian": None},
}


@pytest.fixture(scope="module")
def store(sqlite_stack: dict[str, str]) -> JobStore:
    return JobStore(make_session_factory(make_engine(sqlite_stack["NTKLAB_DATABASE_URL"])))


def run_in_process(store: JobStore, spec: dict, **settings) -> tuple[dict, dict, set[str]]:
    job_id = f"job_{uuid.uuid4().hex}"
    with store.sessions.begin() as session:
        session.add(Job(id=job_id, spec=spec, spec_hash="0" * 64))
    claim = store.claim(job_id, worker="test@host", device="cpu")
    execute(store, claim, Settings(metrics_flush_interval_s=0.05, heartbeat_interval_s=0.05, **settings), "cpu")
    with store.sessions() as session:
        job = session.execute(select(Job).where(Job.id == job_id)).scalar_one()
        chunks = session.execute(
            select(MetricChunk).where(MetricChunk.job_id == job_id).order_by(MetricChunk.chunk)
        ).scalars()
        series: dict[str, list[int]] = {}
        for chunk in chunks:
            series.setdefault(chunk.name, []).extend(chunk.steps)
        names = set(session.execute(select(Artifact.name).where(Artifact.job_id == job_id)).scalars())
        return (
            {"status": job.status, "summary": job.summary, "error": job.error, "step": job.progress_step},
            series,
            names,
        )


def test_a_finished_job_has_every_step_once_and_its_artifacts(store):
    outcome, series, artifacts = run_in_process(store, TINY)
    assert outcome["status"] == "succeeded" and outcome["step"] == 12
    assert series["loss"] == list(range(13)) and series["delta_k"] == [0, 4, 8, 12]
    assert {"kernel_init.npy", "kernel_final.npy"} <= artifacts


def test_an_artifact_over_the_cap_is_skipped_and_named_in_the_summary(store):
    outcome, _, artifacts = run_in_process(store, TINY, max_artifact_bytes=300)
    assert outcome["status"] == "succeeded"
    assert "kernel_init.npy" not in artifacts and "outputs_init.npy" in artifacts
    assert "kernel_init.npy" in outcome["summary"]["artifacts_skipped"]


def test_a_spec_that_no_longer_validates_fails_with_the_field_named(store):
    outcome, series, _ = run_in_process(store, TINY | {"training": {"max_steps": -1}})
    assert outcome["status"] == "failed" and outcome["error"]["type"] == "InvalidSpec"
    assert "max_steps" in outcome["error"]["message"] and series == {}


def test_out_of_memory_is_reported_as_such():
    error = describe_failure(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 40.00 GiB"))
    assert (
        error["type"] == "OutOfMemory"
        and error["message"].startswith("out of memory")
        and "40.00 GiB" in error["message"]
    )
    assert describe_failure(ValueError("bad"))["type"] == "ValueError"


def test_final_rows_extend_streamed_series_and_replace_recomputed_ones():
    buffer = SeriesBuffer()
    for step in range(3):
        buffer.add("loss", step, 1.0 / (step + 1))
        buffer.add("delta_k", step, 0.1 * step)
    streamed = buffer.take()
    rows, replace = final_rows(
        buffer,
        {
            "loss": Series(steps=[0, 1, 2, 3, 4], values=[1.0, 0.5, 1 / 3, 0.25, 0.2]),
            "delta_k": Series(steps=[0, 2, 4], values=[0.0, 0.2, 0.4]),
        },
    )
    assert [(r.name, r.chunk) for r in streamed] == [("loss", 0), ("delta_k", 0)]
    assert replace == ("delta_k",)
    assert [(r.name, r.chunk, r.steps) for r in rows] == [("loss", 1, [3, 4]), ("delta_k", 0, [0, 2, 4])]

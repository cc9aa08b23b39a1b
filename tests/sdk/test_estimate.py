"""`client.jobs.estimate` (sync and async) and `ntklab estimate` against the real service behind uvicorn (no
worker: a dry run queues nothing): the estimate a job would carry, typed, and nothing submitted."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ntklab import errors
from ntklab.client import AsyncClient, Client
from ntklab.resources import JobDryRun
from tests.service.serving import serve

NTKLAB = str(Path(sys.executable).parent / "ntklab")
SPEC = {
    "model": {"hidden": [64]},
    "data": {"kind": "gaussian_mixture", "n_train": 32, "input_dim": 4},
    "training": {"max_steps": 200},
}


@pytest.fixture
def url(app) -> Iterator[str]:
    with serve(app) as base:
        yield base


def test_sync_estimate_is_typed_and_submits_nothing(url):
    with Client(url, max_retries=0) as client:
        estimate = client.jobs.estimate(SPEC)
        assert isinstance(estimate, JobDryRun)
        assert estimate.seconds == pytest.approx(sum(phase.seconds for phase in estimate.phases))
        assert estimate.phases[0].seconds == max(phase.seconds for phase in estimate.phases)
        assert estimate.rates.source == "default" and estimate.parameters == 4 * 64 + 64 + 64 * 2 + 2
        assert list(client.jobs.list()) == []
        job = client.jobs.create(SPEC)
        stored = client.jobs.retrieve(job.id).estimate
        assert stored.model_dump() == estimate.model_dump(include=set(type(stored).model_fields))


def test_async_estimate_and_a_bad_spec(url):
    async def both() -> tuple[JobDryRun, errors.UnprocessableEntityError]:
        async with AsyncClient(url, max_retries=0) as client:
            estimate = await client.jobs.estimate(SPEC, training={"max_steps": 400})
            with pytest.raises(errors.UnprocessableEntityError) as refused:
                await client.jobs.estimate(SPEC, model={"hidden": [0]})
            return estimate, refused.value

    estimate, refused = asyncio.run(both())
    assert isinstance(estimate, JobDryRun) and estimate.work["training"] > 0
    assert refused.errors[0]["field"] == "model.hidden.0"


def run_cli(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NTKLAB_URL": url, "COLUMNS": "100"}
    env.pop("NTKLAB_API_KEY", None)
    return subprocess.run([NTKLAB, "estimate", *args], env=env, capture_output=True, text=True, timeout=120)


def test_cli_prints_the_phases_and_their_seconds(url, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    with Client(url, max_retries=0) as client:
        expected = client.jobs.estimate(SPEC)
    shown = run_cli(url, str(spec))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    rows = {line.split("│")[1].strip(): line for line in shown.stdout.splitlines() if line.count("│") == 5}
    assert set(expected.time) | {"total"} == set(rows)
    assert f"{expected.seconds:.3g}" in rows["total"] and f"{expected.time['training']:.3g}" in rows["training"]
    assert "default: the shipped calibration" in shown.stdout and "max_job_seconds" in shown.stdout
    document = json.loads(run_cli(url, str(spec), "--json").stdout)
    assert document == expected.model_dump(mode="json")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  hidden: [0]\n")
    refused = run_cli(url, str(bad))
    assert refused.returncode == 2 and "model.hidden.0" in refused.stderr


def test_cli_shows_each_worker_class_calibrated_column(url, app, tmp_path):
    """A cpu job finished at twice its estimated training pace: a "cpu" column whose training is 2× the rates'."""
    from ntklab.store.job_store import JobStore

    with Client(url, max_retries=0) as client:
        job = client.jobs.create(SPEC)
        estimated = client.jobs.retrieve(job.id).estimate.time
        store = JobStore(app.state.sessions)
        claim = store.claim(job.id, worker="w0", device="cuda:0")
        store.finish(
            claim,
            "succeeded",
            summary={"steps": 200, "outcome": "max_steps", "timings": {"training": 2 * estimated["training"]}},
        )
        expected = client.jobs.estimate(SPEC)
    cuda = expected.by_worker_class["cuda"]
    training = next(phase for phase in cuda.phases if phase.name == "training")
    assert training.factor == pytest.approx(2.0) and cuda.jobs == 1
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    shown = run_cli(url, str(spec))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    rows = {line.split("│")[1].strip(): line for line in shown.stdout.splitlines() if line.count("│") == 6}
    assert "cuda s" in shown.stdout and set(expected.time) | {"total"} <= set(rows)
    assert f"{training.seconds:.3g} (×2)" in rows["training"] and f"{cuda.seconds:.3g}" in rows["total"]
    assert "(rates)" in rows["hessian"] and "cuda: calibrated by 1 succeeded jobs on cuda:0" in shown.stdout

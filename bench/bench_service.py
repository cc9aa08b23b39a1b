"""Service benchmark: read latency under a steady request rate, and POST → running with an idle worker.

    .venv/bin/python -m bench.bench_service [--rate 200] [--seconds 10] [--jobs 10] [--stacks embedded,redis]

Each stack is started fresh as real subprocesses (ntklab.localstack): the embedded default
(SQLite + filesystem broker) and the full stack (PostgreSQL + Redis, from
NTKLAB_TEST_DATABASE_URL / NTKLAB_TEST_REDIS_URL as `scripts/services.sh` prints them).
Reads are sent open-loop at a fixed rate from this process (asyncio + httpx), so a slow
answer does not lower the offered load; latency is measured per request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import create_engine, make_url, text

from ntklab.localstack import LocalStack, embedded_settings, migrate

TINY_JOB = {
    "model": {"hidden": [16]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4},
    "training": {"max_steps": 5, "target_loss": None},
    "diagnostics": {"hessian": None, "layer_sensitivity": False, "save_weights": False},
}
POLL_S = 0.005


@contextlib.contextmanager
def postgres_redis_settings() -> Iterator[dict[str, str]]:
    """A fresh, migrated PostgreSQL database (dropped afterwards) and Redis, with a queue of its own."""
    server = os.environ.get("NTKLAB_TEST_DATABASE_URL", "postgresql+psycopg://ntklab:ntklab@127.0.0.1:5432/ntklab_test")
    name = f"ntklab_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(server).set(database=name).render_as_string(hide_password=False)
        migrate(url)
        yield {
            "NTKLAB_DATABASE_URL": url,
            "NTKLAB_QUEUE": f"ntklab-bench-{uuid.uuid4().hex[:8]}",
            "NTKLAB_BROKER_URL": os.environ.get("NTKLAB_TEST_REDIS_URL", "redis://127.0.0.1:6390/0"),
        }
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextlib.contextmanager
def stack_settings(name: str) -> Iterator[dict[str, str]]:
    if name == "embedded":
        with tempfile.TemporaryDirectory() as root:
            yield embedded_settings(Path(root))
    else:
        with postgres_redis_settings() as settings:
            yield settings


def wait_status(client: httpx.Client, job_id: str, done: tuple[str, ...]) -> dict:
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in done:
            return job
        time.sleep(POLL_S)


def post_to_running(client: httpx.Client, jobs: int) -> list[float]:
    """Seconds from POST to the job being claimed (status leaves queued), one job at a time on an idle worker."""
    warm = client.post("/v1/jobs", json=TINY_JOB).json()["id"]
    wait_status(client, warm, ("succeeded", "failed"))
    latencies = []
    for _ in range(jobs):
        started = time.perf_counter()
        job_id = client.post("/v1/jobs", json=TINY_JOB).json()["id"]
        wait_status(client, job_id, ("running", "succeeded", "failed"))
        latencies.append(time.perf_counter() - started)
        wait_status(client, job_id, ("succeeded", "failed"))
    return latencies


async def steady_reads(url: str, job_id: str, rate: float, seconds: float) -> tuple[list[float], int]:
    """GET /v1/jobs/{id} at `rate` per second for `seconds`; (latencies of the answered reads, failed reads: non-200
    answers and reads that timed out, 10 s, waiting for a connection or an answer)."""
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10) as client:

        async def one() -> None:
            nonlocal errors
            started = time.perf_counter()
            try:
                response = await client.get(f"/v1/jobs/{job_id}")
            except httpx.TimeoutException:  # the server fell behind the rate: a failed read, not a crash
                errors += 1
                return
            latencies.append(time.perf_counter() - started)
            errors += response.status_code != 200

        tasks = []
        begin = time.perf_counter()
        for index in range(int(rate * seconds)):
            delay = begin + index / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return latencies, errors


def measure(stack_name: str, settings: dict[str, str], args) -> dict:
    with tempfile.TemporaryDirectory() as logs, LocalStack(settings, Path(logs)) as stack:
        running = post_to_running(stack.client, args.jobs)
        job_id = stack.client.post("/v1/jobs", json=TINY_JOB).json()["id"]
        wait_status(stack.client, job_id, ("succeeded",))
        reads, errors = asyncio.run(steady_reads(stack.url, job_id, args.rate, args.seconds))
    ms = np.array(reads) * 1000
    return {
        "stack": stack_name,
        "jobs": len(running),
        "post_to_running_median_ms": statistics.median(running) * 1000,
        "post_to_running_max_ms": max(running) * 1000,
        "reads": len(reads),
        "errors": errors,
        "read_p50_ms": float(np.percentile(ms, 50)),
        "read_p99_ms": float(np.percentile(ms, 99)),
        "read_max_ms": float(ms.max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--stacks", default="embedded,redis")
    args = parser.parse_args()
    rows = []
    for name in args.stacks.split(","):
        with stack_settings(name) as settings:
            rows.append(
                measure("SQLite + filesystem broker" if name == "embedded" else "PostgreSQL + Redis", settings, args)
            )
    print(
        f"\nGET /v1/jobs/{{id}} at {args.rate:.0f} requests/s for {args.seconds:.0f} s, and POST → running "
        f"({args.jobs} jobs, idle worker, 5 ms polling)\n"
    )
    print(
        "| stack | reads | failed (non-200 or timed out) | read p50 (ms) | read p99 (ms) | read max (ms) | POST→running median (ms) | max (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['stack']} | {row['reads']} | {row['errors']} | {row['read_p50_ms']:.1f} | {row['read_p99_ms']:.1f} "
            f"| {row['read_max_ms']:.1f} | {row['post_to_running_median_ms']:.0f} | {row['post_to_running_max_ms']:.0f} |"
        )


if __name__ == "__main__":
    main()

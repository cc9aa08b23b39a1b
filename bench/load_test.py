"""Load test of the full stack: thousands of tiny jobs from several keys, heavy polling, every job accounted for.

    .venv/bin/python -m bench.load_test [--jobs 2000] [--clients 4] [--workers 2] [--api-processes 2]
                                        [--pollers 16] [--poller httpx|wrk]

Not part of `make test`. Loopback only; bounded by `--timeout-s`. A fresh PostgreSQL database
and a Redis queue of its own (NTKLAB_TEST_DATABASE_URL / NTKLAB_TEST_REDIS_URL, as
`scripts/services.sh` prints them) back an API and `--workers` celery workers started by
ntklab.localstack, with auth on: each client submits its share of jobs (max_steps 0–2, no
diagnostics) under its own API key, each POST with an Idempotency-Key. A second process
polls GET /v1/jobs/{id} of submitted jobs with the admin key, `--pollers` requests in
flight, until every job has finished: a Python one (asyncio + httpx, from the first POST;
it costs about as much CPU per request as the API does) or `wrk` with bench/poll_jobs.lua
(from the end of submission, when every id is known; it leaves the cores to the stack). Then the database is counted: jobs submitted,
succeeded, lost (submitted but absent or not finished), duplicated (rows beyond one per
idempotency key). Prints a markdown table with the read latencies and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import signal
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import func, select

from bench.bench_service import postgres_redis_settings
from ntklab.localstack import LocalStack
from ntklab.store import api_keys
from ntklab.store.db import make_engine, make_session_factory
from ntklab.store.models import Job

FINISHED = ("succeeded", "failed", "cancelled")
WRK_SCRIPT = Path(__file__).with_name("poll_jobs.lua")


@dataclass(frozen=True)
class Reads:
    """What the polling process saw: GET /v1/jobs/{id} answers, over how long, latencies in ms."""

    count: int
    seconds: float
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def tiny_job(index: int) -> dict:
    return {
        "name": f"load-{index}",
        "seed": index % 1000,
        "model": {"hidden": [8]},
        "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 2, "probe": {"n": 2}},
        "training": {"max_steps": index % 3, "target_loss": None, "lr": 0.1},
        "diagnostics": {
            "kernel": None,
            "hessian": None,
            "weight_change": False,
            "layer_sensitivity": False,
            "linearization_error": False,
            "save_kernels": [],
            "save_weights": False,
        },
    }


def make_keys(database_url: str, clients: int) -> tuple[list[str], str]:
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        users = [api_keys.create_key(session, f"load-client-{i}").secret for i in range(clients)]
        admin = api_keys.create_key(session, "load-poller", is_admin=True).secret
    engine.dispose()
    return users, admin


def submit_share(url: str, key: str, indices: range) -> tuple[list[tuple[str, str]], list[float]]:
    """POST this client's jobs one after another; returns (idempotency key, job id) pairs and POST seconds."""
    submitted, seconds = [], []
    with httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=30) as client:
        for index in indices:
            idempotency = f"load-{index}-{uuid.uuid4().hex[:8]}"
            started = time.perf_counter()
            answer = client.post("/v1/jobs", json=tiny_job(index), headers={"Idempotency-Key": idempotency})
            seconds.append(time.perf_counter() - started)
            answer.raise_for_status()
            submitted.append((idempotency, answer.json()["id"]))
    return submitted, seconds


def poller(
    url: str, key: str, ids: multiprocessing.Queue, done: multiprocessing.Event, out: Path, in_flight: int
) -> None:
    """Second process: GET /v1/jobs/{id} of random known ids, `in_flight` at a time, until `done`; saves latencies."""
    asyncio.run(_poll(url, key, ids, done, out, in_flight))


async def _poll(url, key, ids, done, out, in_flight) -> None:
    known: list[str] = []
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30, limits=limits) as client:

        async def loop() -> None:
            nonlocal errors
            while not done.is_set():
                while not ids.empty():
                    known.append(ids.get_nowait())
                if not known:
                    await asyncio.sleep(0.01)
                    continue
                started = time.perf_counter()
                try:
                    answer = await client.get(f"/v1/jobs/{random.choice(known)}")
                    errors += answer.status_code != 200
                except httpx.TransportError:
                    errors += 1
                latencies.append(time.perf_counter() - started)

        began = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(in_flight)))
        elapsed = time.perf_counter() - began
    np.save(out, np.array([elapsed, errors, *latencies]))


def wrk_poller(url: str, key: str, job_ids: list[str], scratch: Path, in_flight: int) -> subprocess.Popen:
    """Second process, in C: wrk GETs random ids of `job_ids` with `in_flight` connections until
    SIGINT, then prints its figures as one JSON line (bench/poll_jobs.lua)."""
    id_file = scratch / "job_ids.txt"
    id_file.write_text("\n".join(job_ids) + "\n")
    command = [
        "wrk",
        "-t1",
        f"-c{in_flight}",
        "-d1h",
        "--timeout",
        "30s",
        "-H",
        f"X-API-Key: {key}",
        "-s",
        str(WRK_SCRIPT),
        url,
        "--",
        str(id_file),
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def wrk_figures(reader: subprocess.Popen) -> Reads:
    """The wrk poller's figures, once SIGINT has stopped it."""
    reader.send_signal(signal.SIGINT)
    out, _ = reader.communicate(timeout=60)
    f = json.loads(out.strip().splitlines()[-1])
    return Reads(
        f["requests"],
        f["duration_us"] / 1e6,
        f["non_2xx"] + f["socket_errors"],
        f["p50_us"] / 1000,
        f["p99_us"] / 1000,
        f["max_us"] / 1000,
    )


def httpx_figures(latency_file: Path) -> Reads:
    elapsed, errors, *latencies = np.load(latency_file)
    ms = np.array(latencies) * 1000
    return Reads(len(ms), elapsed, int(errors), np.percentile(ms, 50), np.percentile(ms, 99), ms.max())


def wait_all_finished(database_url: str, expected: int, timeout_s: float) -> float:
    engine = make_engine(database_url)
    started = time.monotonic()
    try:
        with make_session_factory(engine)() as session:
            while time.monotonic() - started < timeout_s:
                finished = session.scalar(select(func.count()).select_from(Job).where(Job.status.in_(FINISHED)))
                session.rollback()
                if finished >= expected:
                    break
                time.sleep(0.5)
    finally:
        engine.dispose()
    return time.monotonic() - started


def account(database_url: str, submitted: list[tuple[str, str]]) -> dict[str, int]:
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        rows = session.execute(select(Job.id, Job.idempotency_key, Job.status, Job.attempts)).all()
    engine.dispose()
    by_id = {row.id: row for row in rows}
    keys = [row.idempotency_key for row in rows]
    return {
        "submitted": len(submitted),
        "rows": len(rows),
        "succeeded": sum(by_id[i].status == "succeeded" for _, i in submitted if i in by_id),
        "lost": sum(i not in by_id or by_id[i].status not in FINISHED for _, i in submitted),
        "duplicated": len(keys) - len(set(keys)),
        "retried": sum(row.attempts > 1 for row in rows),
    }


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--api-processes", type=int, default=2, help="uvicorn worker processes serving the API")
    parser.add_argument("--pollers", type=int, default=16, help="GET requests in flight in the polling process")
    parser.add_argument(
        "--poller",
        choices=("httpx", "wrk"),
        default="httpx",
        help="the polling process: Python (asyncio + httpx, from the first POST) or wrk "
        "(C, needs the wrk binary; from the end of submission, when every id is known)",
    )
    parser.add_argument("--timeout-s", type=float, default=900)

    parser.add_argument(
        "--logs", type=Path, default=None, help="keep the stack's logs here (default: a temporary folder)"
    )
    args = parser.parse_args()

    with postgres_redis_settings() as backing, tempfile.TemporaryDirectory() as scratch:
        logs = args.logs or Path(scratch)
        settings = backing | {
            "NTKLAB_AUTH": "on",
            "NTKLAB_MAX_QUEUED_JOBS_PER_KEY": str(args.jobs + 1),
            "NTKLAB_HEARTBEAT_INTERVAL_S": "1",
            "NTKLAB_METRICS_FLUSH_INTERVAL_S": "1",
        }
        users, admin = make_keys(settings["NTKLAB_DATABASE_URL"], args.clients)
        with LocalStack(settings, logs, api_processes=args.api_processes, workers=args.workers) as stack:
            ids, done = multiprocessing.Queue(), multiprocessing.Event()
            latency_file = Path(scratch) / "latencies.npy"
            if args.poller == "httpx":
                reader = multiprocessing.Process(
                    target=poller, args=(stack.url, admin, ids, done, latency_file, args.pollers)
                )
                reader.start()
            shares = [range(c, args.jobs, args.clients) for c in range(args.clients)]
            began = time.monotonic()
            with ThreadPoolExecutor(args.clients) as pool:
                futures = [pool.submit(submit_share, stack.url, key, share) for key, share in zip(users, shares)]
                while not all(f.done() for f in futures):
                    time.sleep(0.2)
                results = [f.result() for f in futures]
            submitted = [pair for pairs, _ in results for pair in pairs]
            submit_s = time.monotonic() - began
            if args.poller == "wrk":
                reader = wrk_poller(stack.url, admin, [job_id for _, job_id in submitted], Path(scratch), args.pollers)
            else:
                for _, job_id in submitted:
                    ids.put(job_id)
            drain_s = wait_all_finished(settings["NTKLAB_DATABASE_URL"], len(submitted), args.timeout_s)
            if args.poller == "wrk":
                reads = wrk_figures(reader)
            else:
                done.set()
                reader.join(timeout=60)
                reads = httpx_figures(latency_file)
            counts = account(settings["NTKLAB_DATABASE_URL"], submitted)
    post = np.array([s for _, seconds in results for s in seconds]) * 1000
    polling = "from the end of submission" if args.poller == "wrk" else "from the first submission"
    rows = [
        ("machine", f"{os.cpu_count()} CPUs ({cpu_model()}), {platform.system()} {platform.release()}"),
        (
            "stack",
            f"PostgreSQL + Redis, API with {args.api_processes} uvicorn processes, {args.workers} workers, auth on, {args.clients} client keys",
        ),
        ("jobs submitted", f"{counts['submitted']} in {submit_s:.1f} s ({counts['submitted'] / submit_s:.0f}/s)"),
        ("POST /v1/jobs p50 / p99", f"{np.percentile(post, 50):.1f} / {np.percentile(post, 99):.1f} ms"),
        ("all finished after", f"{submit_s + drain_s:.1f} s"),
        ("succeeded / lost / duplicated", f"{counts['succeeded']} / {counts['lost']} / {counts['duplicated']}"),
        ("jobs retried (attempts > 1)", str(counts["retried"])),
        (
            f"reads (GET /v1/jobs/{{id}}, {args.poller}, {args.pollers} in flight, {polling})",
            f"{reads.count} in {reads.seconds:.1f} s = {reads.count / reads.seconds:.0f}/s, {reads.errors} non-200",
        ),
        ("read p50 / p99 / max", f"{reads.p50_ms:.1f} / {reads.p99_ms:.1f} / {reads.max_ms:.1f} ms"),
    ]
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    if counts["lost"] or counts["duplicated"] or counts["succeeded"] != counts["submitted"]:
        raise SystemExit("some jobs were lost, duplicated or did not succeed")


if __name__ == "__main__":
    main()

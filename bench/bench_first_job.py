"""The first job after `ntklab up` against the second: POST → succeeded, each split into queue wait and run.

    .venv/bin/python -m bench.bench_first_job [--rounds 3] [--when ready|api] [--threads N] [--spec SPEC.json]
    .venv/bin/python -m bench.bench_first_job --engine THREADS [--rounds 3]

Each round starts `ntklab up` afresh in an empty folder (its own SQLite file and broker folder,
a free port) as `make up` does, submits a small job with every default diagnostic (SMALL_JOB: a
second or less once warm, so a start-up cost shows; or --spec), waits for it, submits the same
spec again and waits for that; then stops the stack.
`--when ready` (the default) submits once the worker logged "worker process ready" (what a user
who reads the log sees before submitting); `--when api` as soon as the API answers, so the first
job also waits for the worker to start. Times are from sending the POST to reading `succeeded`,
polled every 10 ms; `queued` is created_at → started_at and `run` started_at → finished_at as the
service stored them, `engine` the job's own wall_time_s (the engine's phases and storing).
`--engine THREADS` times the engine alone instead (`engine_rounds`): no service, no queue, so
the first job's one-time costs are not lost in the noise of a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

from ntklab.localstack import clean_env, free_port, wait_until

SMALL_JOB = json.dumps(
    {
        "model": {"hidden": [64]},
        "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4},
        "training": {"max_steps": 50},
    }
)
READY_LINE = "worker process ready"
POLL_S = 0.01


def timed_job(client: httpx.Client, spec: str) -> dict[str, float]:
    """POST `spec`, poll until it finishes; seconds end to end, queued and running."""
    started = time.monotonic()
    job = client.post("/v1/jobs", content=spec, headers={"Content-Type": "application/json"}).json()
    while job["status"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(POLL_S)
        job = client.get(f"/v1/jobs/{job['id']}").json()
    total = time.monotonic() - started
    if job["status"] != "succeeded":
        raise RuntimeError(f"job {job['id']} ended {job['status']}: {job.get('error')}")
    stamps = {key: _seconds(job[key]) for key in ("created_at", "started_at", "finished_at")}
    return {
        "total": total,
        "queued": stamps["started_at"] - stamps["created_at"],
        "run": stamps["finished_at"] - stamps["started_at"],
        "engine": job["summary"]["wall_time_s"],
        "phases": job["summary"]["timings"],
    }


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def one_round(when: str, spec: str, threads: int) -> tuple[dict[str, float], dict[str, float]]:
    """A fresh `ntklab up` (its worker on `threads` torch threads, 0: its share of the cores); the first and the
    second job's times."""
    with tempfile.TemporaryDirectory() as folder:
        port, log = free_port(), Path(folder) / "up.log"
        env = clean_env({"NTKLAB_AUTH": "off", "NTKLAB_WORKER_THREADS": str(threads)})
        with open(log, "wb") as out:
            up = subprocess.Popen(
                [str(Path(sys.executable).parent / "ntklab"), "up", "--port", str(port), "--json"],
                cwd=folder,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=out,
                start_new_session=True,
            )
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                wait_until(lambda: _answers(client), 120, f"API never answered; see {log}", alive=up)
                if when == "ready":
                    wait_until(lambda: READY_LINE in log.read_text(), 120, f"worker never ready; see {log}", alive=up)
                return timed_job(client, spec), timed_job(client, spec)
        finally:
            os.killpg(up.pid, signal.SIGTERM)
            up.wait(timeout=60)


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


ENGINE_ROUND = """
import json, sys, time
import torch, torch._dynamo
import ntklab.engine.run as engine
from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.run import warm_up
torch.set_num_threads(int(sys.argv[1]))
if sys.argv[2] == "warm":
    warm_up("cpu")
spec, seconds = JobSpec.model_validate_json(sys.argv[3]), []
for _ in range(2):
    started = time.perf_counter()
    ntklab.engine.run(spec, device="cpu")
    seconds.append(time.perf_counter() - started)
print(json.dumps(seconds))
"""


def engine_rounds(rounds: int, threads: int, spec: str) -> dict[str, list[list[float]]]:
    """The engine alone, no service: in a fresh process that imported what a worker's pool process imports, the first
    and second run of `spec`, without ("cold") and after ("warm") the warm-up job, the two alternated."""
    times: dict[str, list[list[float]]] = {"cold": [], "warm": []}
    for _ in range(rounds):
        for mode in times:
            done = subprocess.run(
                [sys.executable, "-c", ENGINE_ROUND, str(threads), mode, spec],
                capture_output=True,
                text=True,
                check=True,
                env=os.environ | {"OMP_NUM_THREADS": str(threads)},
            )
            times[mode].append(json.loads(done.stdout))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--when", choices=("ready", "api"), default="ready")
    parser.add_argument("--spec", type=Path, help="a job spec (.json); default SMALL_JOB")
    parser.add_argument("--threads", type=int, default=0, help="the worker's torch threads (0: as `ntklab up` gives)")
    parser.add_argument("--engine", type=int, metavar="THREADS", help="time the engine alone on THREADS torch threads")
    args = parser.parse_args()
    spec = args.spec.read_text() if args.spec else SMALL_JOB
    if args.engine:
        print(f"engine alone, {args.engine} torch threads, job: {spec}")
        print("| process | first run median (s) | second run median (s) | each round: first/second (s) |")
        print("|---|---|---|---|")
        for mode, runs in engine_rounds(args.rounds, args.engine, spec).items():
            firsts, seconds = [first for first, _ in runs], [second for _, second in runs]
            print(
                f"| {mode} | {statistics.median(firsts):.2f} | {statistics.median(seconds):.2f} | "
                f"{', '.join(f'{a:.2f}/{b:.2f}' for a, b in runs)} |"
            )
        return
    rounds = [one_round(args.when, spec, args.threads) for _ in range(args.rounds)]
    print(
        f"job: {spec}; submitted when: {args.when}; worker threads: {args.threads or 'default'}; "
        f"{args.rounds} fresh `ntklab up`"
    )
    print(
        "| job | POST→succeeded median (s) | all rounds (s) | queued median (s) | run median (s) | engine median (s) |"
    )
    print("|---|---|---|---|---|---|")
    for index, label in enumerate(("first", "second")):
        times = [round_[index] for round_ in rounds]
        totals = [t["total"] for t in times]
        medians = [statistics.median(t[key] for t in times) for key in ("queued", "run", "engine")]
        print(
            f"| {label} | {statistics.median(totals):.2f} | {', '.join(f'{t:.2f}' for t in totals)} | "
            + " | ".join(f"{median:.2f}" for median in medians)
            + " |"
        )
    print(json.dumps(rounds))


if __name__ == "__main__":
    main()

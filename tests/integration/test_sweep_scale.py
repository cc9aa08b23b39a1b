"""A big sweep against a real API process (uvicorn) on PostgreSQL + Redis and on SQLite: a 100-seed sweep over
1000 × 999 inline values answers in bounded time and memory and is stored once; retried and concurrent
duplicates with one Idempotency-Key store one sweep. No worker runs here: nothing takes the jobs."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from ntklab import Client
from ntklab.errors import APITimeoutError
from ntklab.store.db import make_engine
from tests.conftest import LiveStack

ROWS, COLUMNS, SEEDS = 1000, 999, 100
MiB = 1024 * 1024


@pytest.fixture(scope="module", params=["postgres+redis", "sqlite+filesystem"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """The API alone, as `make up` runs it, on either stack."""
    backing = "postgres_redis_stack" if request.param == "postgres+redis" else "sqlite_stack"
    stack = LiveStack(request.getfixturevalue(backing), tmp_path_factory.mktemp("logs"))
    try:
        stack.start_api()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def inline_sweep() -> dict:
    """100 seeds over one inline data set of 1000 × 999 values (short decimals: a body of about 4 MB)."""
    x = [[((row * column) % 7) / 4 for column in range(COLUMNS)] for row in range(ROWS)]
    y = [float(row % 2) for row in range(ROWS)]
    base = {"data": {"kind": "inline", "x": x, "y": y}, "model": {"hidden": [8]}, "training": {"max_steps": 5}}
    return {"name": "inline-100-seeds", "base": base, "grid": {"seed": list(range(SEEDS))}}


def status_kib(pid: int, field: str) -> int:
    """VmRSS (resident now) or VmHWM (peak resident since the last reset) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (its own threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stored_bytes(api: LiveStack, sweep_id: str) -> tuple[int, int]:
    """(bytes of the sweep row's spec, bytes of its jobs' spec + spec_patch) as the database holds them."""
    url = api.settings["NTKLAB_DATABASE_URL"]
    size = "length(CAST({} AS BLOB))" if url.startswith("sqlite") else "octet_length({}::text)"
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            sweep = connection.execute(
                text(f"SELECT {size.format('spec')} FROM sweeps WHERE id = :id"), {"id": sweep_id}
            ).scalar_one()
            jobs = connection.execute(
                text(
                    f"SELECT sum({size.format('spec')} + coalesce({size.format('spec_patch')}, 0)) FROM jobs WHERE sweep_id = :id"
                ),
                {"id": sweep_id},
            ).scalar_one()
    finally:
        engine.dispose()
    return sweep, jobs


def sweeps_named(api: LiveStack, name: str) -> tuple[int, int]:
    """(sweeps, jobs) stored under this sweep name."""
    engine = make_engine(api.settings["NTKLAB_DATABASE_URL"])
    try:
        with engine.connect() as connection:
            return tuple(
                connection.execute(
                    text(
                        "SELECT count(DISTINCT s.id), count(j.id) FROM sweeps s LEFT JOIN jobs j ON j.sweep_id = s.id WHERE s.name = :name"
                    ),
                    {"name": name},
                ).one()
            )
    finally:
        engine.dispose()


def test_a_100_seed_inline_sweep_answers_in_bounded_time_and_memory_and_is_stored_once(api, inline_sweep):
    body = json.dumps(inline_sweep, separators=(",", ":")).encode()
    headers = {"content-type": "application/json"}
    warm_up = {
        **inline_sweep,
        "name": "warm-up",
        "base": {**inline_sweep["base"], "data": {"kind": "gaussian_mixture"}},
    }
    assert api.client.post("/v1/sweeps", json=warm_up).status_code == 202
    pid = api.api.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS, so VmHWM below is this request's peak
    before, cpu_before = status_kib(pid, "VmRSS"), cpu_seconds(pid)
    started = time.perf_counter()
    answer = api.client.post("/v1/sweeps", content=body, headers=headers, timeout=60)
    elapsed, cpu_s = time.perf_counter() - started, cpu_seconds(pid) - cpu_before
    growth_mib = (status_kib(pid, "VmHWM") - before) / 1024
    assert answer.status_code == 202, answer.text[:500]
    sweep = answer.json()
    sweep_bytes, job_bytes = stored_bytes(api, sweep["id"])
    started = time.perf_counter()
    again = api.client.get(f"/v1/sweeps/{sweep['id']}", timeout=60)
    read_s = time.perf_counter() - started
    print(
        f"\n[{api.settings['NTKLAB_DATABASE_URL'].split(':')[0]}] body {len(body) / MiB:.2f} MiB, {SEEDS} jobs: "
        f"POST {elapsed:.2f} s ({cpu_s:.2f} s of API CPU), API peak RSS growth {growth_mib:.1f} MiB; stored: sweep "
        f"{sweep_bytes / MiB:.2f} MiB, jobs {job_bytes} bytes ({job_bytes / SEEDS:.0f} per job); GET {read_s:.2f} s; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    assert sweep["total"] == SEEDS and len(sweep["table"]) == SEEDS
    assert cpu_s < 2.0 and growth_mib < 100, "wall-clock time also counts other processes' load on a shared machine"
    assert sweep_bytes < 2 * len(body), "the data is stored once, on the sweep"
    assert job_bytes < SEEDS * 300, "each job stores its patch, not the data"
    assert again.status_code == 200 and read_s < 2.0 and again.json()["counts"]["queued"] == SEEDS
    last = api.client.get(f"/v1/jobs/{sweep['table'][-1]['job_id']}", timeout=60).json()
    assert last["spec"]["seed"] == SEEDS - 1 and last["spec"]["data"]["x"] == inline_sweep["base"]["data"]["x"]


def test_twenty_concurrent_duplicates_store_one_sweep(api):
    name = f"race-{uuid.uuid4().hex[:8]}"
    sweep = {
        "name": name,
        "base": {"model": {"hidden": [8]}, "training": {"max_steps": 5}},
        "grid": {"seed": list(range(8))},
    }

    def post(_) -> httpx.Response:
        with httpx.Client(base_url=api.url, timeout=60) as client:
            return client.post("/v1/sweeps", json=sweep, headers={"Idempotency-Key": name})

    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(post, range(20)))
    assert {answer.status_code for answer in answers} == {202}, {
        answer.text for answer in answers if answer.status_code != 202
    }
    assert len({answer.json()["id"] for answer in answers}) == 1
    assert sweeps_named(api, name) == (1, 8)


def test_an_sdk_create_that_times_out_and_retries_stores_one_sweep(api, inline_sweep):
    """timeout 0.25 s against a request that takes longer: the SDK sends it 3 times with one key."""
    name = f"retried-{uuid.uuid4().hex[:8]}"
    body = {**inline_sweep, "name": name, "grid": {"seed": list(range(8))}}
    with Client(api.url, timeout=0.25, max_retries=2) as hasty, pytest.raises(APITimeoutError):
        hasty.sweeps.create(body, idempotency_key=name)
    with Client(api.url, timeout=60) as patient:
        answered = patient.sweeps.create(body, idempotency_key=name)
    time.sleep(3)  # the timed-out attempts still run on the server; let them finish before counting
    assert sweeps_named(api, name) == (1, 8)
    assert answered.total == 8


def test_the_sdk_reads_every_page_of_the_table(api):
    sweep = {
        "name": "paged",
        "base": {"model": {"hidden": [8]}, "training": {"max_steps": 5}},
        "grid": {"seed": list(range(25))},
    }
    with Client(api.url) as client:
        created = client.sweeps.create(sweep)
        rows = list(client.sweeps.iter_rows(created.id, page_size=10))
        assert client.sweeps.retrieve(created.id, limit=10).has_more is True
        assert [row["seed"] for row in rows] == list(range(25))
        assert [row["job_id"] for row in rows] == [row["job_id"] for row in client.sweeps.table(created.id)]

"""Many hosts, for real: the servers on one host, a worker on each of two others, a cable pulled mid-job.

Each host is a network namespace on one bridge (netns.py). `server` runs PostgreSQL (a
scratch cluster), Redis and the API with its reaper; `hosta` and `hostb` run one
`python -m ntklab.workers` each, configured with nothing but the server's address, like workers on
other machines. The test is a client on the same LAN.

1. A job runs on one worker host; that host's link goes down mid-job.
2. Its heartbeat goes stale, the reaper requeues the job, the other host claims it as
   attempt 2 and finishes it: every series has each step exactly once.
3. The link comes back. The cut-off worker, which trained on in the dark, reaches the
   database, finds the row no longer its own (`status = 'running' AND attempts = 1` fails)
   and drops its result: the job row, its metric chunks and its artifacts stay exactly as
   the other host left them.

The server's PostgreSQL ends sessions idle in a transaction after a few seconds: a worker
cut off between its heartbeat UPDATE and its COMMIT would otherwise hold the row lock, and
the reaper's UPDATE would wait until PostgreSQL drops the dead session (TCP keepalive, hours).
Skipped where this process is not root or `ip netns` is unavailable (CI runs as root).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, create_engine, select

from ntklab import localstack
from ntklab.localstack import (
    API_READY_TIMEOUT_S,
    QUICK_RECOVERY_SETTINGS,
    WORKER_READY_LINE,
    WORKER_READY_TIMEOUT_S,
    StackError,
    clean_env,
    wait_until,
)
from ntklab.store.models import Artifact, Job, MetricChunk, utcnow
from ntklab.workers.celery_app import TASK_NAME

from .jobs import LONG_RUN_STEPS, assert_complete, finished, long_run_spec, running_past, series, submit, wait_for
from .netns import Lan, netns_unavailable, remove_leftovers
from .servers import RedisServer, ScratchPostgres

pytestmark = [pytest.mark.slow, pytest.mark.stack]

SERVER = "server"
WORKER_HOSTS = ("hosta", "hostb")
API_PORT, REDIS_PORT = 8000, 6379
RUN_S = 8.0
HEARTBEAT_STALE = dt.timedelta(seconds=float(QUICK_RECOVERY_SETTINGS["NTKLAB_HEARTBEAT_STALE_S"]))
IDLE_IN_TRANSACTION_TIMEOUT = "3s"
NOTICE_TIMEOUT_S = 60
TASK_ENDED = re.compile(rf"Task {re.escape(TASK_NAME)}\[[^\]]+\] (succeeded|raised)")
ROW_TAKEN_LINE = "row taken over, stopping"
RESULT_DROPPED_LINE = "another worker owns the row; result dropped"


class LanStack:
    """The API on the server host and one worker node per worker host, each inside its host's namespace."""

    def __init__(self, lan: Lan, settings: dict[str, str], logs: Path):
        self.lan, self.logs = lan, logs
        self.url = f"http://{lan.address(SERVER)}:{API_PORT}"
        self.settings = settings | {"NTKLAB_PUBLIC_URL": self.url}
        self.client = httpx.Client(base_url=self.url, timeout=10)
        self.nodes = {host: f"{host}@{lan.name}" for host in WORKER_HOSTS}
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        """Start the API and both workers at once; return when all answer (workers: engine imported)."""
        api = self._spawn(
            SERVER,
            [
                "uvicorn",
                "--factory",
                "ntklab.service.app:create_app",
                "--host",
                self.lan.address(SERVER),
                "--port",
                str(API_PORT),
            ],
            "api",
        )
        workers = {
            host: self._spawn(
                host,
                [
                    "ntklab.workers",
                    "-n",
                    self.nodes[host],
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ],
                host,
            )
            for host in WORKER_HOSTS
        }
        wait_until(self._api_ready, API_READY_TIMEOUT_S, f"API never answered; see {self.logs}/api.log", alive=api)
        for host, worker in workers.items():
            wait_until(
                lambda: WORKER_READY_LINE in self.log(host),
                WORKER_READY_TIMEOUT_S,
                f"worker on {host} never became ready; see {self.logs}/{host}.log",
                alive=worker,
            )

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()

    def stop(self) -> None:
        """Switch the hosts off: SIGKILL each process group (a cut-off worker may hang on its dead sockets)."""
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        self.client.close()

    def _spawn(self, host: str, module_command: list[str], log: str) -> subprocess.Popen:
        with open(self.logs / f"{log}.log", "wb") as out:
            process = subprocess.Popen(
                [*self.lan.run_in(host), sys.executable, "-m", *module_command],
                env=clean_env(self.settings),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def _api_ready(self) -> bool:
        try:
            return self.client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False


@pytest.fixture(scope="module")
def lan() -> Iterator[Lan]:
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    remove_leftovers()
    network = Lan([SERVER, *WORKER_HOSTS])
    try:
        network.create()
        yield network
    finally:
        network.remove()


@pytest.fixture(scope="module")
def server_urls(lan: Lan, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """PostgreSQL (migrated) and Redis on the server host, as settings."""
    postgres = ScratchPostgres(
        lan.address(SERVER),
        lan.cidr,
        lan.run_in(SERVER),
        {"idle_in_transaction_session_timeout": IDLE_IN_TRANSACTION_TIMEOUT},
    )
    redis = RedisServer(REDIS_PORT, tmp_path_factory.mktemp("lan-redis"), lan.address(SERVER), lan.run_in(SERVER))
    try:
        postgres.start()
        redis.start()
        localstack.migrate(postgres.url)
        yield {"NTKLAB_DATABASE_URL": postgres.url, "NTKLAB_BROKER_URL": redis.url}
    finally:
        if redis.pidfile.exists():
            redis.kill()
        postgres.stop()


@pytest.fixture(scope="module")
def lan_stack(lan: Lan, server_urls: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LanStack]:
    stack = LanStack(
        lan, QUICK_RECOVERY_SETTINGS | server_urls | {"NTKLAB_QUEUE": "ntklab"}, tmp_path_factory.mktemp("lan-logs")
    )
    try:
        stack.start()
    except StackError as error:
        stack.stop()
        pytest.fail(str(error), pytrace=False)
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def database(server_urls: dict[str, str]) -> Iterator[Engine]:
    engine = create_engine(server_urls["NTKLAB_DATABASE_URL"])
    yield engine
    engine.dispose()


def job_row(database: Engine, job_id: str) -> dict:
    with database.connect() as connection:
        return connection.execute(select(Job.__table__).where(Job.id == job_id)).one()._asdict()


def stored(database: Engine, job_id: str) -> dict:
    """Everything the database holds for the job: its row, its metric chunks and its artifacts (bytes included)."""
    return {
        "job": job_row(database, job_id),
        "chunks": rows_of(database, MetricChunk, job_id),
        "artifacts": rows_of(database, Artifact, job_id),
    }


def rows_of(database: Engine, model, job_id: str) -> list[dict]:
    with database.connect() as connection:
        query = select(model.__table__).where(model.job_id == job_id).order_by(model.id)
        return [row._asdict() for row in connection.execute(query)]


def test_a_worker_host_cut_off_mid_job_loses_it_to_the_other_host_and_writes_nothing_after(lan, lan_stack, database):
    job_id = submit(lan_stack, long_run_spec(RUN_S, seed=5))
    wait_for(lan_stack, job_id, running_past(100), timeout_s=60)
    first = job_row(database, job_id)
    cut_off = first["worker"].split("@")[0]
    (other,) = set(WORKER_HOSTS) - {cut_off}

    lan.cut(cut_off)
    cut_at = utcnow()
    last_heartbeat = job_row(database, job_id)["heartbeat_at"]
    assert (first["status"], first["attempts"]) == ("running", 1) and cut_at - last_heartbeat < HEARTBEAT_STALE

    done = wait_for(lan_stack, job_id, finished, timeout_s=60)
    final = job_row(database, job_id)
    assert (done["status"], done["attempts"], final["worker"]) == ("succeeded", 2, lan_stack.nodes[other]), done[
        "error"
    ]
    assert final["enqueued_at"] - last_heartbeat >= HEARTBEAT_STALE, "requeued only once the heartbeat went stale"
    assert done["summary"]["outcome"] == "time_budget"
    points = series(lan_stack, job_id)
    assert_complete(points, LONG_RUN_STEPS, done["summary"]["steps"])
    assert all(len(set(s["step"])) == len(s["step"]) for s in points.values()), "a step stored twice"
    assert not TASK_ENDED.search(lan_stack.log(cut_off)), "the cut-off worker ended its attempt while cut off"

    before = stored(database, job_id)
    assert before["artifacts"] and before["chunks"], "the snapshot holds what the cut-off worker could overwrite"
    lan.restore(cut_off)
    wait_until(
        lambda: TASK_ENDED.search(lan_stack.log(cut_off)),
        NOTICE_TIMEOUT_S,
        f"the cut-off worker on {cut_off} did not end its lost attempt once back; see its log",
    )
    assert stored(database, job_id) == before, "the cut-off worker wrote into the job it lost"
    assert ROW_TAKEN_LINE in lan_stack.log(cut_off), "its heartbeat did not find the row taken over"
    assert RESULT_DROPPED_LINE in lan_stack.log(cut_off), "it did not drop its result"

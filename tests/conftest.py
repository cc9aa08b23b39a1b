"""Fixtures for the real servers: PostgreSQL, Redis, and live ntklab stacks (API + celery worker).

`make test` starts PostgreSQL and Redis with scripts/services.sh and exports
NTKLAB_TEST_DATABASE_URL / NTKLAB_TEST_REDIS_URL. A test that asks for a server that does
not answer fails with a message saying how to start it; nothing is skipped.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TEST_DATABASE_URL = os.environ.get(
    "NTKLAB_TEST_DATABASE_URL", "postgresql+psycopg://ntklab:ntklab@127.0.0.1:5432/ntklab_test"
)
TEST_REDIS_URL = os.environ.get("NTKLAB_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
HOW_TO_START = "start the servers with `scripts/services.sh` (make test does) or set NTKLAB_TEST_DATABASE_URL / NTKLAB_TEST_REDIS_URL"
FAST_WORKER_SETTINGS = {
    "NTKLAB_AUTH": "off",
    "NTKLAB_HEARTBEAT_INTERVAL_S": "0.2",
    "NTKLAB_HEARTBEAT_STALE_S": "2",
    "NTKLAB_REAPER_INTERVAL_S": "0.5",
    "NTKLAB_METRICS_FLUSH_INTERVAL_S": "0.2",
}
WORKER_READY_LINE = "worker process ready"
WORKER_READY_TIMEOUT_S = 120
API_READY_TIMEOUT_S = 60


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The URL of a reachable PostgreSQL database whose role may create databases."""
    engine = create_engine(TEST_DATABASE_URL)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as error:
        pytest.fail(f"PostgreSQL is not reachable at {TEST_DATABASE_URL}: {error.orig}. {HOW_TO_START}", pytrace=False)
    finally:
        engine.dispose()
    return TEST_DATABASE_URL


@pytest.fixture(scope="module")
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh database for this test module, migrated with `alembic upgrade head`, dropped afterwards."""
    name = f"ntklab_t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(postgres_server).set(database=name).render_as_string(hide_password=False)
    try:
        migrate(url)
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def redis_url() -> str:
    import redis

    client = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as error:
        pytest.fail(f"Redis is not reachable at {TEST_REDIS_URL}: {error}. {HOW_TO_START}", pytrace=False)
    finally:
        client.close()
    return TEST_REDIS_URL


def migrate(database_url: str) -> None:
    """`alembic upgrade head` in a subprocess, so the settings it reads are the ones given here."""
    done = subprocess.run(
        [str(BIN / "alembic"), "upgrade", "head"], cwd=REPO, env=clean_env({"NTKLAB_DATABASE_URL": database_url}),
        capture_output=True, text=True, timeout=120,
    )
    if done.returncode:
        pytest.fail(f"alembic upgrade head failed on {database_url}:\n{done.stdout}\n{done.stderr}", pytrace=False)


def clean_env(settings: dict[str, str]) -> dict[str, str]:
    """This process's environment without any NTKLAB_ setting, plus `settings`."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("NTKLAB_") or k.startswith("NTKLAB_TEST_")}
    return inherited | {"PYTHONUNBUFFERED": "1"} | settings


# --------------------------------------------------------------------------- stacks


@pytest.fixture(scope="module")
def sqlite_stack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Settings of the embedded default: a migrated SQLite file and a filesystem broker, both in tmp."""
    root = tmp_path_factory.mktemp("embedded")
    url = f"sqlite:///{root / 'ntklab.db'}"
    migrate(url)
    return stack_settings(url, "filesystem://", broker_dir=root / "broker")


@pytest.fixture(scope="module")
def postgres_redis_stack(postgres_url: str, redis_url: str) -> Iterator[dict[str, str]]:
    """Settings of the full stack: a fresh PostgreSQL database and Redis, with a queue of this module's own."""
    import redis

    settings = stack_settings(postgres_url, redis_url)
    yield settings
    client = redis.Redis.from_url(redis_url)
    queue = settings["NTKLAB_QUEUE"]
    for key in client.scan_iter(f"*{queue}*"):
        client.delete(key)
    client.close()


def stack_settings(database_url: str, broker_url: str, broker_dir: Path | None = None) -> dict[str, str]:
    settings = FAST_WORKER_SETTINGS | {
        "NTKLAB_DATABASE_URL": database_url,
        "NTKLAB_BROKER_URL": broker_url,
        "NTKLAB_QUEUE": f"ntklab-test-{uuid.uuid4().hex[:8]}",
    }
    if broker_dir is not None:
        settings["NTKLAB_BROKER_DIR"] = str(broker_dir)
    return settings


class LiveStack:
    """An API (uvicorn) and celery workers as real subprocesses, each in a process group of its own."""

    def __init__(self, settings: dict[str, str], logs: Path):
        self.settings, self.logs = settings, logs
        self.port = free_port()
        self.settings = settings | {"NTKLAB_PUBLIC_URL": f"http://127.0.0.1:{self.port}"}
        self.api: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)

    def start_api(self) -> None:
        command = [str(BIN / "uvicorn"), "service.app:app", "--host", "127.0.0.1", "--port", str(self.port)]
        self.api = self._spawn(command, "api")
        wait_until(lambda: self._api_ready(), API_READY_TIMEOUT_S, f"API never answered /healthz; see {self.logs}/api.log",
                   alive=self.api)

    def start_worker(self) -> subprocess.Popen:
        """A `celery worker` like the one `make up` starts; returns once its pool process imported the engine."""
        name = f"w{len(self.workers)}-{uuid.uuid4().hex[:6]}@%h"
        command = [
            str(BIN / "celery"), "-A", "workers.celery_app", "worker", "--concurrency=1", "-Q", self.settings["NTKLAB_QUEUE"],
            "-n", name, "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]
        log = f"worker{len(self.workers)}"
        worker = self._spawn(command, log)
        self.workers.append(worker)
        wait_until(lambda: WORKER_READY_LINE in (self.logs / f"{log}.log").read_text(), WORKER_READY_TIMEOUT_S,
                   f"celery worker never became ready; see {self.logs}/{log}.log", alive=worker)
        return worker

    def kill(self, process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the worker's parent and its pool children)."""
        if process.poll() is None:
            os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def stop(self) -> None:
        for process in [*self.workers, self.api]:
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=10)
            if process is not None:
                _kill_group_leftovers(process.pid)
        self.client.close()

    def _spawn(self, command: list[str], log: str) -> subprocess.Popen:
        with open(self.logs / f"{log}.log", "wb") as out:
            return subprocess.Popen(command, cwd=REPO, env=clean_env(self.settings), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def _api_ready(self) -> bool:
        try:
            return self.client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False


def _kill_group_leftovers(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition, timeout_s: float, message: str, *, alive: subprocess.Popen | None = None, every_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if alive is not None and alive.poll() is not None:
            pytest.fail(f"process exited with {alive.returncode}: {message}", pytrace=False)
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s} s: {message}", pytrace=False)


@pytest.fixture(scope="module", params=["postgres+redis", "sqlite+filesystem"])
def live_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """A running API and one worker on either stack; torch is imported once per module and stack."""
    backing = "postgres_redis_stack" if request.param == "postgres+redis" else "sqlite_stack"
    stack = LiveStack(request.getfixturevalue(backing), tmp_path_factory.mktemp("logs"))
    try:
        stack.start_api()
        stack.start_worker()
        yield stack
    finally:
        stack.stop()

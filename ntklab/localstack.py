"""Run an ntklab stack on this machine as real subprocesses: `uvicorn` API + `celery worker`s.

Used by `make demo`, the benchmarks and the test suite. Each process runs in a process
group of its own (so a worker's pool children die with it) and logs to `logs/<name>.log`.
The stack's configuration is a dict of NTKLAB_* environment variables; nothing else
from this process's NTKLAB_* environment leaks into the children.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
WORKER_READY_LINE = "worker process ready"
WORKER_READY_TIMEOUT_S = 120
API_READY_TIMEOUT_S = 60
QUICK_RECOVERY_SETTINGS = {
    "NTKLAB_AUTH": "off",
    "NTKLAB_HEARTBEAT_INTERVAL_S": "0.2",
    "NTKLAB_HEARTBEAT_STALE_S": "2",
    "NTKLAB_REAPER_INTERVAL_S": "0.5",
    "NTKLAB_METRICS_FLUSH_INTERVAL_S": "0.2",
}
"""Heartbeats, reaper and metric flushes tuned so a lost worker is noticed within seconds (tests)."""


class StackError(RuntimeError):
    """A process of the stack did not start, or exited; the message names its log file."""


def clean_env(settings: dict[str, str]) -> dict[str, str]:
    """This process's environment without any NTKLAB_ setting (test URLs excepted), plus `settings`."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("NTKLAB_") or k.startswith("NTKLAB_TEST_")}
    return inherited | {"PYTHONUNBUFFERED": "1"} | settings


def migrate(database_url: str) -> None:
    """`ntklab migrate` in a subprocess, so the settings it reads are exactly these."""
    done = subprocess.run(
        [str(BIN / "ntklab"), "migrate"],
        env=clean_env({"NTKLAB_DATABASE_URL": database_url}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode:
        raise StackError(f"ntklab migrate failed on {database_url}:\n{done.stdout}\n{done.stderr}")


def embedded_settings(root: Path) -> dict[str, str]:
    """The embedded default (SQLite file + filesystem broker) inside `root`, migrated."""
    root.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{root / 'ntklab.db'}"
    migrate(url)
    return {
        "NTKLAB_DATABASE_URL": url,
        "NTKLAB_BROKER_URL": "filesystem://",
        "NTKLAB_BROKER_DIR": str(root / "broker"),
        "NTKLAB_QUEUE": f"ntklab-{uuid.uuid4().hex[:8]}",
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(
    condition: Callable[[], bool],
    timeout_s: float,
    message: str,
    *,
    alive: subprocess.Popen | None = None,
    every_s: float = 0.05,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if alive is not None and alive.poll() is not None:
            raise StackError(f"process exited with {alive.returncode}: {message}")
        time.sleep(every_s)
    raise StackError(f"timed out after {timeout_s} s: {message}")


class LocalStack:
    """An API and celery workers as subprocesses; `url` is where the API answers."""

    def __init__(
        self, settings: dict[str, str], logs: Path, port: int | None = None, api_processes: int = 1, workers: int = 1
    ):
        self.logs = logs
        self.initial_workers = workers
        self.logs.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.api_processes = api_processes
        self.url = f"http://127.0.0.1:{self.port}"
        self.settings = settings | {"NTKLAB_PUBLIC_URL": self.url}
        self.api: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.client = httpx.Client(base_url=self.url, timeout=10)

    def __enter__(self) -> LocalStack:
        """Start the API and `workers` workers (default one); leaving the block stops everything."""
        self.start_api()
        self.start_workers(self.initial_workers)
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start_api(self) -> None:
        if self.api is not None and self.api.poll() is None:
            raise StackError(f"this stack's API already runs on port {self.port}")
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "ntklab.service.app:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.api_processes),
            "--no-proxy-headers",
        ]
        self.api = self._spawn(command, "api")
        wait_until(
            self._api_ready,
            API_READY_TIMEOUT_S,
            f"API never answered /healthz; see {self.logs}/api.log",
            alive=self.api,
        )

    def start_worker(self) -> subprocess.Popen:
        """A worker node like the one `make up` starts (`python -m ntklab.workers`); returns once its pool process
        imported the engine. Its queue is the stack's NTKLAB_QUEUE."""
        return self.start_workers(1)[0]

    def start_workers(self, count: int) -> list[subprocess.Popen]:
        """`count` worker nodes started together (their start-ups overlap); returns once every pool
        process imported the engine."""
        started = []
        for _ in range(count):
            name, log = f"w{len(self.workers)}-{uuid.uuid4().hex[:6]}@%h", f"worker{len(self.workers)}"
            command = [
                sys.executable,
                "-m",
                "ntklab.workers",
                "-n",
                name,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ]
            self.workers.append(self._spawn(command, log))
            started.append((self.workers[-1], log))
        for worker, log in started:
            wait_until(
                lambda: WORKER_READY_LINE in (self.logs / f"{log}.log").read_text(),
                WORKER_READY_TIMEOUT_S,
                f"celery worker never became ready; see {self.logs}/{log}.log",
                alive=worker,
            )
        return [worker for worker, _ in started]

    def kill(self, process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the worker's parent and its pool children)."""
        if process.poll() is None:
            os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM to every process at once (workers finish a running job first), then wait for each;
        SIGKILL to a process group still there after 10 s."""
        processes = [process for process in [*self.workers, self.api] if process is not None]
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            _kill_group_leftovers(process.pid)
        self.client.close()

    def _spawn(self, command: list[str], log: str) -> subprocess.Popen:
        with open(self.logs / f"{log}.log", "wb") as out:
            return subprocess.Popen(
                command, env=clean_env(self.settings), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

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

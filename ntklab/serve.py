"""`ntklab up` / `make up`: migrate, then run the API and worker(s) in the foreground.

Works from any folder with the server and worker extras installed: the migrations ship
inside the package, and the embedded default keeps its SQLite file and broker folder in
`./var`. The processes inherit this environment (so NTKLAB_* settings apply to all of
them) and write to this terminal; Ctrl-C (or SIGTERM) stops them all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ntklab.config.settings import Settings
from ntklab.store.migrate import upgrade
from ntklab.workers.threads import cores_per_worker

FIRST_JOB = '{"model": {"hidden": [512], "output_activation": "swish"}, "training": {"max_steps": 500}}'


def api_command(host: str, port: int, api_processes: int) -> list[str]:
    """uvicorn serving the app factory (nothing is built when ntklab.service.app is imported).

    `--no-proxy-headers`: uvicorn would otherwise believe X-Forwarded-For from any loopback
    client; the app believes it only from `settings.trusted_proxies` (service/app.py).
    """
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "ntklab.service.app:create_app",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(api_processes),
        "--no-proxy-headers",
    ]


def worker_command(name: str) -> list[str]:
    """One worker node (workers/main.py): one pool process on the settings' queue."""
    return [sys.executable, "-m", "ntklab.workers", "-n", name]


def worker_env(settings: Settings, workers: int) -> dict[str, str]:
    """This environment with NTKLAB_WORKER_THREADS: the setting, else each worker's share of the cores
    (workers/threads.py), so N workers on C cores run C // N torch threads each and never oversubscribe."""
    threads = settings.worker_threads or cores_per_worker(workers)
    return os.environ | {"NTKLAB_WORKER_THREADS": str(threads)}


def serve(host: str, port: int, workers: int, api_processes: int = 1, *, as_json: bool = False) -> int:
    """Run until Ctrl-C, SIGTERM or a crash; with `as_json`, stdout holds one line {"url", "docs"} and
    everything else (these lines, the servers' logs) goes to stderr."""
    settings = Settings()
    if settings.database_url.startswith("sqlite:///"):
        Path(settings.database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    upgrade(settings.database_url)
    logs = sys.stderr if as_json else None
    processes = [subprocess.Popen(api_command(host, port, api_processes), stdout=logs)]
    for index in range(workers):
        processes.append(
            subprocess.Popen(worker_command(f"worker{index}@%h"), stdout=logs, env=worker_env(settings, workers))
        )
    url = f"http://{host}:{port}"
    if as_json:
        print(json.dumps({"url": url, "docs": f"{url}/docs"}), flush=True)
    human = sys.stderr if as_json else sys.stdout
    print(f"\nntklab is starting: API docs at {url}/docs", file=human, flush=True)
    print(
        f"submit a job:  curl -s -X POST {url}/v1/jobs -H 'Content-Type: application/json' -d '{FIRST_JOB}'",
        file=human,
        flush=True,
    )
    print("Ctrl-C stops the API and the worker(s).\n", file=human, flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    crashed = False
    try:
        while not crashed:
            time.sleep(0.5)
            crashed = any(process.poll() is not None for process in processes)
    except KeyboardInterrupt:
        pass
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            process.wait(timeout=30)
    return 1 if crashed else 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt

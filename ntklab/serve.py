"""`ntklab up` / `make up`: migrate, then run the API and celery workers in the foreground.

The processes inherit this environment (so NTKLAB_* settings apply to all of them) and write
to this terminal; Ctrl-C (or SIGTERM) stops them all.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from alembic import command
from alembic.config import Config

from ntklab.localstack import REPO
from service.settings import get_settings

BIN = Path(sys.executable).parent


def serve(host: str, port: int, workers: int, api_processes: int = 1) -> int:
    settings = get_settings()
    if settings.database_url.startswith("sqlite:///"):
        Path(settings.database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(Config(str(REPO / "alembic.ini")), "head")
    api = [str(BIN / "uvicorn"), "service.app:app", "--host", host, "--port", str(port), "--workers", str(api_processes)]
    processes = [subprocess.Popen(api, cwd=REPO)]
    for index in range(workers):
        processes.append(subprocess.Popen(
            [str(BIN / "celery"), "-A", "workers.celery_app", "worker", "--concurrency=1", "-Q", settings.queue,
             "-n", f"worker{index}@%h", "--loglevel=INFO"], cwd=REPO))
    url = f"http://{host}:{port}"
    print(f"\nntklab is starting: API docs at {url}/docs", flush=True)
    print(f"submit a job:  curl -s -X POST {url}/v1/jobs -H 'Content-Type: application/json' "
          f"-d @examples/quickstart.json", flush=True)
    print("Ctrl-C stops the API and the worker(s).\n", flush=True)
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

"""X-Forwarded-For is believed only from configured proxies: the per-address limit on failed key checks
cannot be dodged from the host by inventing addresses.

The API runs as `ntklab up` runs it (ntklab.serve.api_command: uvicorn in its own process) on
a loopback port, with auth on and 3 failed key checks allowed per address and minute. uvicorn's
default believes X-Forwarded-For from any loopback client, so before the fix every request
that named a new address got a fresh window.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from ntklab.serve import api_command

FAILURES_ALLOWED = 3


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def api(sqlite_template: Path, folder: Path, **settings: str) -> Iterator[httpx.Client]:
    """The API on a copy of the migrated SQLite template, auth on; yields a client of it."""
    shutil.copy(sqlite_template, folder / "ntklab.db")
    port = free_port()
    environment = (
        os.environ
        | {
            "NTKLAB_DATABASE_URL": f"sqlite:///{folder / 'ntklab.db'}",
            "NTKLAB_BROKER_URL": "filesystem://",
            "NTKLAB_BROKER_DIR": str(folder / "broker"),
            "NTKLAB_AUTH": "on",
            "NTKLAB_REAPER_ENABLED": "false",
            "NTKLAB_AUTH_FAILURES_PER_MINUTE": str(FAILURES_ALLOWED),
        }
        | settings
    )
    with open(folder / "api.log", "wb") as log:
        process = subprocess.Popen(
            api_command("127.0.0.1", port, 1), env=environment, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 30
            while not _answers(client):
                assert process.poll() is None and time.monotonic() < deadline, (folder / "api.log").read_text()
                time.sleep(0.1)
            yield client
    finally:
        process.terminate()
        process.wait(timeout=10)


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


def bad_key_from(client: httpx.Client, forwarded_for: str) -> int:
    headers = {"X-API-Key": "ntk_" + "x" * 43, "X-Forwarded-For": forwarded_for}
    return client.get("/v1/jobs", headers=headers).status_code


def test_a_loopback_client_cannot_dodge_the_failed_key_limit_with_x_forwarded_for(sqlite_template, tmp_path):
    with api(sqlite_template, tmp_path) as client:
        statuses = [bad_key_from(client, f"198.51.100.{index}") for index in range(FAILURES_ALLOWED + 2)]
    assert statuses == [401] * FAILURES_ALLOWED + [429, 429], "every address counted as the peer, 127.0.0.1"


def test_a_configured_proxy_is_believed(sqlite_template, tmp_path):
    with api(sqlite_template, tmp_path, NTKLAB_TRUSTED_PROXIES='["127.0.0.1"]') as client:
        spread = [bad_key_from(client, f"198.51.100.{index}") for index in range(FAILURES_ALLOWED + 2)]
        one = [bad_key_from(client, "203.0.113.9") for _ in range(FAILURES_ALLOWED + 1)]
    assert spread == [401] * (FAILURES_ALLOWED + 2), "each forwarded address has its own window"
    assert one == [401] * FAILURES_ALLOWED + [429]

"""`schemathesis run --checks all` over the whole OpenAPI schema, against the API as `ntklab up` serves it.

The API is uvicorn in its own process (ntklab.serve.api_command) on a PostgreSQL database of
this module, with auth on; schemathesis runs every phase (examples, coverage, fuzzing,
stateful) with every check and the admin key, derandomized. Its HAR report holds every
request it sent: there must be at least NTKLAB_FUZZ_CASES of them and no answer may be a 5xx.
The failures of the other checks are printed (pytest -s); what is left of them is
"schema-valid request rejected" where the schema cannot say what the service checks (caps,
ONNX bytes that do not parse, grid paths). --max-examples is NTKLAB_FUZZ_CASES shared out over
the operations; the coverage phase adds its boundary cases on top (about 3000 requests, a
minute, at the default of 200). The acceptance run is

    NTKLAB_FUZZ_CASES=2000 .venv/bin/pytest -s tests/fuzz/test_openapi_all_checks.py
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ntklab.serve import api_command

CASES = int(os.environ.get("NTKLAB_FUZZ_CASES", "200"))
ADMIN_KEY = "ntk_" + "f" * 43
RUN_LIMIT_S = 1800

pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_LIMIT_S + 120)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def api_url(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("all-checks")
    port = free_port()
    environment = os.environ | {
        "NTKLAB_DATABASE_URL": postgres_url,
        "NTKLAB_BROKER_URL": "filesystem://",
        "NTKLAB_BROKER_DIR": str(folder / "broker"),
        "NTKLAB_QUEUE": f"all-checks-{port}",
        "NTKLAB_AUTH": "on",
        "NTKLAB_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "NTKLAB_REAPER_ENABLED": "false",
        "NTKLAB_MAX_SWEEP_JOBS": "8",
        "NTKLAB_MAX_QUEUED_JOBS_PER_KEY": "1000000",
        "NTKLAB_PUBLIC_URL": f"http://127.0.0.1:{port}",
    }
    with open(folder / "api.log", "wb") as log:
        process = subprocess.Popen(
            api_command("127.0.0.1", port, 1), env=environment, stdout=log, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(url):
            assert process.poll() is None and time.monotonic() < deadline, (folder / "api.log").read_text()
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def operations(url: str) -> int:
    paths = httpx.get(f"{url}/openapi.json", timeout=10).json()["paths"]
    return sum(1 for methods in paths.values() for method in methods if method != "parameters")


def test_schemathesis_all_checks_find_no_server_error(api_url: str, tmp_path: Path):
    per_operation = -(-CASES // operations(api_url))
    har, report = tmp_path / "requests.har", tmp_path / "report.json"
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{api_url}/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        str(per_operation),
        "--continue-on-failure",
        "--seed",
        "0",
        "--workers",
        "1",
        "--no-color",
        "--header",
        f"X-API-Key: {ADMIN_KEY}",
        "--request-timeout",
        "60",
        "--report",
        "har,json",
        "--report-har-path",
        str(har),
        "--report-json-path",
        str(report),
    ]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_LIMIT_S, cwd=tmp_path)  # its cache too
    elapsed = time.monotonic() - started
    entries = json.loads(har.read_text())["log"]["entries"]
    statuses = Counter(entry["response"]["status"] for entry in entries)
    server_errors = [
        (entry["request"]["method"], entry["request"]["url"], entry["response"]["status"])
        for entry in entries
        if entry["response"]["status"] >= 500
    ]
    print(
        f"\nschemathesis --checks all: {len(entries)} requests in {elapsed:.0f} s, {len(server_errors)} × 5xx; "
        f"statuses {dict(sorted(statuses.items()))}\n{done.stdout[-6000:]}"
    )
    assert len(entries) >= CASES, f"only {len(entries)} requests were sent"
    assert not server_errors, server_errors[:20]

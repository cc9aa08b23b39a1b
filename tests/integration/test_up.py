"""`ntklab up` (what `make up` runs): migrates an empty SQLite file, serves /docs, runs the README's curl job."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ntklab.localstack import clean_env, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow]


def test_up_serves_docs_and_finishes_the_quickstart_job_then_stops_on_sigterm(tmp_path: Path):
    port = free_port()
    settings = {
        "NTKLAB_DATABASE_URL": f"sqlite:///{tmp_path / 'fresh' / 'ntklab.db'}",
        "NTKLAB_BROKER_DIR": str(tmp_path / "broker"),
        "NTKLAB_QUEUE": f"up-{port}",
    }
    up = subprocess.Popen(
        [str(Path(sys.executable).parent / "ntklab"), "up", "--port", str(port)],
        cwd=REPO,
        env=clean_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        wait_until(lambda: _answers(api), 60, "ntklab up never served /healthz", alive=up)
        assert "swagger" in api.get("/docs").text.lower()
        quickstart = json.loads((REPO / "examples" / "quickstart.json").read_text())
        job = api.post("/v1/jobs", json=quickstart).json()
        deadline = time.monotonic() + 180
        while (current := api.get(f"/v1/jobs/{job['id']}").json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, current
            time.sleep(0.2)
        assert current["status"] == "succeeded", current["error"]
        assert current["summary"]["delta_k_max"] > 0
    finally:
        up.send_signal(signal.SIGTERM)
        output = up.communicate(timeout=60)[0].decode()
        api.close()
    assert up.returncode == 0, output
    assert f"http://127.0.0.1:{port}/docs" in output and "curl -s -X POST" in output
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2) as after:
        assert not _answers(after), "the API still answers after ntklab up stopped"


def _answers(api: httpx.Client) -> bool:
    try:
        return api.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False

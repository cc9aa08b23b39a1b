"""The server knows its address: `ntklab up --port P` (what `make up PORT=P` runs) answers Location
headers and artifact URLs on port P, unless NTKLAB_PUBLIC_URL says otherwise.

Without the setting, the base is the address each request came to (its Host and port), so a
client that reached the API as localhost:P is sent back to localhost:P.
"""

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

SMALL_JOB = {
    "model": {"hidden": [8]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4, "probe": {"n": 4}},
    "training": {"max_steps": 5, "target_loss": None, "lr": 0.1},
    "diagnostics": {"hessian": None},
}


@pytest.mark.slow
def test_up_on_a_port_of_its_own_answers_locations_on_that_port(tmp_path: Path):
    """A real `ntklab up --port P --json` in an empty folder, with no NTKLAB_* setting at all."""
    port = free_port()
    up = subprocess.Popen(
        [str(Path(sys.executable).parent / "ntklab"), "up", "--port", str(port), "--json"],
        cwd=tmp_path,
        env=clean_env({}),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    api = httpx.Client(base_url=base, timeout=10)
    try:
        wait_until(lambda: _answers(api), 90, "ntklab up never served /healthz", alive=up)
        created = api.post("/v1/jobs", json=SMALL_JOB)
        job_id = created.json()["id"]
        assert created.headers["Location"] == f"{base}/v1/jobs/{job_id}"
        by_name = httpx.post(f"http://localhost:{port}/v1/jobs", json=SMALL_JOB, timeout=10)
        assert by_name.headers["Location"] == f"http://localhost:{port}/v1/jobs/{by_name.json()['id']}"
        _wait_finished(api, job_id)
        urls = [entry["url"] for entry in api.get(f"/v1/jobs/{job_id}/artifacts").json()["data"]]
        assert urls and all(url.startswith(f"{base}/v1/jobs/{job_id}/artifacts/") for url in urls)
        assert api.get(urls[0]).status_code == 200
    finally:
        up.send_signal(signal.SIGTERM)
        stdout = up.communicate(timeout=60)[0]
        api.close()
    assert up.returncode == 0
    assert json.loads(stdout) == {"url": base, "docs": f"{base}/docs"}, "--json: one document on stdout, logs elsewhere"


def _wait_finished(api: httpx.Client, job_id: str) -> None:
    deadline = time.monotonic() + 180
    while (job := api.get(f"/v1/jobs/{job_id}").json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert job["status"] == "succeeded", job["error"]


def _answers(api: httpx.Client) -> bool:
    try:
        return api.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False

"""The hostile requests of issue #10, kept in regressions.json, replayed against the app on SQLite and PostgreSQL.

Each answer must have the status the file expects, never a 5xx; a 4xx is application/problem+json
(with a body naming its status, except for HEAD). The app runs in process with auth on (an admin
key is sent unless the entry sends its own), 3 failed key checks per address and minute, and
server errors answered as 500s so that they are seen here as statuses. Fixtures stand for the
placeholders: {job} is a job with the artifact kernel_init.npy, {sweep} a sweep of two widths
whose fit is named `$x^$`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert

from config.settings import Settings
from ntklab import localstack
from service.app import create_app
from store.models import Artifact, utcnow

REGRESSIONS = json.loads((Path(__file__).parent / "regressions.json").read_text())["requests"]
ADMIN_KEY = "ntk_" + "r" * 43
PROBLEM = "application/problem+json"
TINY = {"model": {"hidden": [4]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 2},
        "training": {"max_steps": 1}}


def inline_sweep_100_seeds() -> bytes:
    """Issue #10 item 1: a 4 MB sweep, inline data of 1000 points × 999 features and a grid of 100 seeds."""
    rows = ",".join("[" + ",".join(str((i * 31 + j * 17) % 10 / 10) for j in range(999)) + "]" for i in range(1000))
    targets = ",".join(str(i % 2) for i in range(1000))
    base = f'{{"data": {{"kind": "inline", "x": [{rows}], "y": [{targets}]}}, "training": {{"max_steps": 10}}}}'
    return f'{{"base": {base}, "grid": {{"seed": {list(range(100))}}}}}'.encode()


GENERATED = {"inline_sweep_100_seeds": inline_sweep_100_seeds}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("regressions")
    if request.param == "sqlite":
        url = f"sqlite:///{root / 'ntklab.db'}"
        localstack.migrate(url)
    else:
        url = request.getfixturevalue("postgres_url")
    settings = Settings(
        database_url=url, broker_url="filesystem://", broker_dir=root / "broker", queue=f"regressions-{uuid.uuid4().hex[:8]}",
        public_url="http://testserver", reaper_enabled=False, auth="on", bootstrap_admin_key=ADMIN_KEY,
        auth_failures_per_minute=3,
    )
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False, headers={"x-api-key": ADMIN_KEY}) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def placeholders(client: TestClient) -> dict[str, str]:
    job = client.post("/v1/jobs", json=TINY)
    assert job.status_code == 202, job.text
    with client.app.state.sessions.begin() as session:
        session.execute(insert(Artifact).values(job_id=job.json()["id"], name="kernel_init.npy", media_type="application/octet-stream",
                                                size=3, data=b"abc", created_at=utcnow()))
    sweep = client.post("/v1/sweeps", json={"base": TINY, "grid": {"model.hidden.0": [2, 4]},
                                            "fits": [{"y": "$x^$", "x": "model.hidden.0"}]})
    assert sweep.status_code == 202, sweep.text
    return {"job": job.json()["id"], "sweep": sweep.json()["id"]}


def send(client: TestClient, entry: dict, placeholders: dict[str, str], repetition: int):
    headers = {name: value.replace("{i}", str(repetition)) for name, value in entry.get("headers", {}).items()}
    content = None
    if "raw" in entry:
        content = entry["raw"].encode()
    elif "json" in entry:
        content = json.dumps(entry["json"]).encode()
    elif "generate" in entry:
        content = GENERATED[entry["generate"]]()
    if content is not None:
        headers.setdefault("content-type", "application/json")
    path = entry["path"].format(**placeholders)
    peer = TestClient(client.app, client=(entry["client"], 50000), raise_server_exceptions=False) if "client" in entry else client
    return peer.request(entry["method"], path, content=content, headers=headers, follow_redirects=False)


@pytest.mark.parametrize("entry", REGRESSIONS, ids=[entry["id"] for entry in REGRESSIONS])
def test_a_hostile_request_gets_its_status_and_never_a_5xx(client, placeholders, entry):
    expected = entry["status"] if isinstance(entry["status"], list) else [entry["status"]]
    started = time.monotonic()
    answers = [send(client, entry, placeholders, repetition) for repetition in range(entry.get("repeat", 1))]
    elapsed = time.monotonic() - started
    assert all(answer.status_code < 500 for answer in answers), [(a.status_code, a.text[:300]) for a in answers]
    last = answers[-1]
    assert last.status_code in expected, (last.status_code, last.text[:500])
    if last.status_code >= 400:
        assert last.headers["content-type"] == PROBLEM
        if entry["method"] != "HEAD":
            assert last.json()["status"] == last.status_code
    for header in entry.get("absent_headers", []):
        assert header not in last.headers, last.headers
    assert elapsed < entry.get("within_s", 60), f"answered after {elapsed:.1f} s"

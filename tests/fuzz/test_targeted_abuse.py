"""Hostile input the random fuzzer is unlikely to build: huge grids, path traversal, absurd sizes, deep JSON.

Each answer is a 4xx application/problem+json, quick, and stores nothing it should not.
The app runs in process on a migrated SQLite file and re-raises any would-be 500.
"""

from __future__ import annotations

import json
import time
import uuid
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from ntklab import localstack
from ntklab.config.settings import Settings
from ntklab.service.app import create_app
from ntklab.store.models import Job, Sweep
from tests.stored_artifacts import add_artifact

PROBLEM = "application/problem+json"
MAX_SWEEP_JOBS = 8
TINY = {
    "model": {"hidden": [4]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 2},
    "training": {"max_steps": 1},
}
TRAVERSALS = [
    "../../../../etc/passwd",
    "..%2F..%2F..%2Fetc%2Fpasswd",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "..\\..\\win.ini",
    "/etc/passwd",
    "kernel_init.npy/../../../etc/passwd",
    "....//....//etc/passwd",
    "%252e%252e%252f",
]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("abuse")
    url = f"sqlite:///{root / 'ntklab.db'}"
    localstack.migrate(url)
    return create_app(
        Settings(
            database_url=url,
            broker_url="filesystem://",
            broker_dir=root / "broker",
            queue=f"abuse-{uuid.uuid4().hex[:8]}",
            public_url="http://testserver",
            reaper_enabled=False,
            auth="off",
            max_sweep_jobs=MAX_SWEEP_JOBS,
        )
    )


@pytest.fixture(scope="module")
def client(app) -> TestClient:
    with TestClient(app, raise_server_exceptions=True) as test_client:
        yield test_client


def problem(answer, *statuses: int) -> dict:
    assert answer.status_code in statuses, (answer.status_code, answer.text[:300])
    assert answer.headers["content-type"] == PROBLEM
    return answer.json()


def fields(body: dict) -> set[str]:
    return {error["field"] for error in body.get("errors", [])}


def count(app, model) -> int:
    with app.state.sessions() as session:
        return session.scalar(select(func.count()).select_from(model))


# --------------------------------------------------------------------------- huge grids


@pytest.mark.parametrize(
    "grid",
    [
        {f"model.hidden.{i}" if i < 1 else f"seed{i}": list(range(1000)) for i in range(8)},
        {"seed": list(range(200_000))},
        {"seed": [0, 1, 2], "training.max_steps": [1, 2, 3]},
    ],
    ids=["8-axes-of-1000 (10^24 jobs)", "one-axis-of-200000", "9-jobs"],
)
def test_a_grid_over_the_job_cap_is_refused_at_once_and_stores_nothing(app, client, grid):
    before = count(app, Sweep), count(app, Job)
    started = time.monotonic()
    body = problem(client.post("/v1/sweeps", json={"base": TINY, "grid": grid}), 413, 422)
    assert time.monotonic() - started < 5, "the product is counted, not built"
    assert str(MAX_SWEEP_JOBS) in body["detail"] + json.dumps(body.get("errors", []))
    assert (count(app, Sweep), count(app, Job)) == before


# --------------------------------------------------------------------------- path traversal


@pytest.fixture(scope="module")
def job_with_artifact(app, client) -> str:
    answer = client.post("/v1/jobs", json=TINY)
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["id"]
    with app.state.sessions.begin() as session:
        add_artifact(session, job_id, "kernel_init.npy", "application/octet-stream", b"abc")
    return job_id


def test_the_stored_artifact_downloads(client, job_with_artifact):
    answer = client.get(f"/v1/jobs/{job_with_artifact}/artifacts/kernel_init.npy")
    assert answer.status_code == 200 and answer.content == b"abc"


@pytest.mark.parametrize("name", TRAVERSALS)
def test_a_traversing_artifact_name_is_a_404(client, job_with_artifact, name):
    """The name travels as one percent-encoded path segment, so no client resolves its dot segments first."""
    answer = client.get(f"/v1/jobs/{job_with_artifact}/artifacts/{quote(name, safe='')}", follow_redirects=False)
    problem(answer, 404)
    assert "root:" not in answer.text


@pytest.mark.parametrize("job_id", ["..", "../jobs", "../../sweeps", "%2e%2e"])
def test_a_traversing_job_id_is_a_404(client, job_id):
    problem(client.get(f"/v1/jobs/{quote(job_id, safe='')}/artifacts/kernel_init.npy", follow_redirects=False), 404)


@pytest.fixture(scope="module")
def sweep_id(client) -> str:
    spec = {"base": TINY, "grid": {"model.hidden.0": [2, 4]}, "fits": [{"y": "delta_k_max", "x": "model.hidden.0"}]}
    answer = client.post("/v1/sweeps", json=spec)
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


@pytest.mark.parametrize(
    "query",
    [
        *({"x": name} for name in TRAVERSALS),
        *({"y": name} for name in TRAVERSALS),
        {"format": "../png"},
        {"format": "png/../../etc/passwd"},
        {"x": "model." * 40 + "x"},
    ],
)
def test_sweep_plot_parameters_that_traverse_are_a_4xx(client, sweep_id, query):
    answer = client.get(f"/v1/sweeps/{sweep_id}/plot", params=query)
    problem(answer, 404, 409, 422)
    assert "root:" not in answer.text


# --------------------------------------------------------------------------- absurd sizes


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (TINY | {"model": {"hidden": [-1]}}, "model.hidden.0"),
        (TINY | {"model": {"hidden": [10**30]}}, "model.hidden.0"),
        (TINY | {"model": {"hidden": [1] * 10_000}}, "model.hidden"),
        (TINY | {"data": {"kind": "gaussian_mixture", "n_train": 10**30}}, "data.n_train"),
        (TINY | {"data": {"kind": "gaussian_mixture", "n_train": -8}}, "data.n_train"),
        (TINY | {"data": {"kind": "gaussian_mixture", "input_dim": 10**9}}, "data.input_dim"),
        (TINY | {"data": {"kind": "gaussian_mixture", "probe": {"n": 10**9}}}, "data.probe.n"),
        (TINY | {"training": {"max_steps": -5}}, "training.max_steps"),
        (TINY | {"training": {"max_steps": 2**63}}, "training.max_steps"),
        (TINY | {"training": {"batch_size": 0}}, "training.batch_size"),
        (TINY | {"seed": -1}, "seed"),
        (TINY | {"diagnostics": {"hessian": {"top_k": 10**6}}}, "diagnostics.hessian.top_k"),
    ],
)
def test_negative_and_absurd_sizes_are_a_422_naming_the_field(app, client, spec, field):
    before = count(app, Job)
    body = problem(client.post("/v1/jobs", json=spec), 422)
    assert any(name == field or name.startswith(field + ".") for name in fields(body)), body
    assert count(app, Job) == before


@pytest.mark.parametrize("grid", [{"model.hidden.0": [-1, 4]}, {"training.max_steps": [10**30]}, {"seed": [-3]}])
def test_absurd_grid_values_are_a_422_and_store_no_sweep(app, client, grid):
    before = count(app, Sweep), count(app, Job)
    problem(client.post("/v1/sweeps", json={"base": TINY, "grid": grid}), 422)
    assert (count(app, Sweep), count(app, Job)) == before


@pytest.mark.parametrize("query", ["limit=-1", "limit=99999999999999999999", "limit=1e3", "after=" + "A" * 5000])
def test_absurd_list_parameters_are_a_422(client, query):
    problem(client.get(f"/v1/jobs?{query}"), 422)


# --------------------------------------------------------------------------- deep JSON in sweeps


def nested(depth: int, leaf=1):
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


@pytest.mark.parametrize("depth", [100_000, 3_000])
def test_a_sweep_nested_deeper_than_the_parser_is_a_400(client, depth):
    raw = '{"base": ' + '{"a": ' * depth + "1" + "}" * depth + ', "grid": {"seed": [0]}}'
    answer = client.post("/v1/sweeps", content=raw, headers={"content-type": "application/json"})
    problem(answer, 400, 422)


@pytest.mark.parametrize(
    "body",
    [
        {"base": TINY | {"name": nested(500)}, "grid": {"seed": [0]}},
        {"base": TINY, "grid": {"name": [nested(500)]}},
        {"base": nested(500), "grid": {"seed": [0]}},
        {"base": TINY, "grid": {"seed": [0]}, "fits": [{"y": "delta_k_max", "x": "seed", "group_by": [nested(200)]}]},
    ],
    ids=["deep-base-field", "deep-grid-value", "deep-base", "deep-group-by"],
)
def test_deep_values_in_a_sweep_are_a_422_and_store_nothing(app, client, body):
    before = count(app, Sweep), count(app, Job)
    problem(client.post("/v1/sweeps", json=body), 422)
    assert (count(app, Sweep), count(app, Job)) == before

"""Text that SQL or UTF-8 cannot hold never makes a 500: one rule for every stored string, problems that encode
any input, plot labels drawn as typed.

Lone surrogates (`"\\ud800"` in a JSON body, as a value or a key) are refused with a 422 whose
body is valid UTF-8 and shows the surrogate as the text `\\ud800`, over the in-process
client and over a real HTTP connection to uvicorn. NUL characters in any stored string (job
and sweep names and tags, fit names, grid values, upload names) are a 422 naming the field,
on SQLite and on PostgreSQL (which cannot store them), with nothing stored. Labels such as
`$x^$` are drawn as text, not parsed as mathtext.
"""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest
import uvicorn
from sqlalchemy import func, select

from ntklab.service.app import create_app
from ntklab.store.models import Dataset, Job, Sweep
from tests.upload_files import npz
from tests.worker_writes import sweep_succeeded

PROBLEM = "application/problem+json"
JSON = {"content-type": "application/json"}
TINY = {
    "model": {"hidden": [4]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 2},
    "training": {"max_steps": 1},
}
SURROGATE_BODIES = {
    "value": ("/v1/jobs", b'{"name": "\\ud800"}', "name"),
    "key": ("/v1/jobs", b'{"\\ud800": 1}', "body"),
    "value-in-a-number-field": ("/v1/jobs", b'{"model": {"hidden": ["\\udc00x"]}}', "model.hidden.0"),
    "sweep-base-key": ("/v1/sweeps", b'{"base": {"\\ud800": 1}, "grid": {"seed": [0]}}', "base"),
    "sweep-grid-value": ("/v1/sweeps", b'{"grid": {"name": ["a\\udfffb"]}}', "grid.name.0"),
}


def problem(answer, status: int) -> dict:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == PROBLEM
    answer.content.decode("utf-8")  # strict: the body is valid UTF-8
    body = answer.json()
    assert body["status"] == status and body["detail"]
    return body


def fields(body: dict) -> set[str]:
    return {error["field"] for error in body.get("errors", [])}


def stored(db, table) -> int:
    return db.scalar(select(func.count()).select_from(table))


def assert_names_surrogate_visibly(body: dict, field: str) -> None:
    assert any(name == field or name.startswith(field + ".") for name in fields(body)), body
    assert "\\ud" in str(body), "the lone surrogate is shown as the text \\udXXX"


# --------------------------------------------------------------------------- lone surrogates


@pytest.mark.parametrize(("path", "raw", "field"), SURROGATE_BODIES.values(), ids=SURROGATE_BODIES.keys())
def test_a_lone_surrogate_is_a_422_problem_that_encodes(client, db, path, raw, field):
    answer = client.post(path, content=raw, headers=JSON)
    assert_names_surrogate_visibly(problem(answer, 422), field)
    assert (stored(db, Job), stored(db, Sweep)) == (0, 0)


@pytest.fixture
def served(settings):
    """The app behind a real uvicorn on a loopback port, in this process: (base URL, app)."""
    app = create_app(settings)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=5)


def test_over_a_real_connection_every_surrogate_body_gets_its_problem(served):
    """Before, the 422 handler failed to encode its own answer and uvicorn dropped the connection."""
    with httpx.Client(base_url=served, timeout=10) as http:
        for path, raw, field in SURROGATE_BODIES.values():
            answer = http.post(path, content=raw, headers=JSON)
            assert_names_surrogate_visibly(problem(answer, 422), field)
        invalid_utf8 = http.post("/v1/jobs", content=b'{"name": "\xff"}', headers=JSON)
        assert problem(invalid_utf8, 400)["type"].endswith("malformed-json")
        encoded_surrogate = http.post(
            "/v1/jobs", content=b'{"\xed\xa0\x80": 1}', headers=JSON
        )  # json.loads lets it pass
        assert_names_surrogate_visibly(problem(encoded_surrogate, 422), "body")
        paired = http.post(
            "/v1/jobs", content=b'{"name": "\\ud83e\\uddea", "training": {"max_steps": 1}}', headers=JSON
        )
        assert paired.status_code == 202 and paired.json()["name"] == "\U0001f9ea", "a surrogate pair is one character"


# --------------------------------------------------------------------------- NUL in stored strings


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "swe\x00ep", "base": TINY, "grid": {"seed": [0]}}, "name"),
        ({"tags": ["ok", "t\x00"], "base": TINY, "grid": {"seed": [0]}}, "tags.1"),
        ({"base": TINY, "grid": {"name": ["fine", "nu\x00l"]}}, "grid.name.1"),
        ({"base": TINY, "grid": {"tags.0": ["\x00"]}}, "grid.tags.0.0"),
        ({"base": TINY | {"name": "b\x00"}, "grid": {"seed": [0]}}, "base.name"),
        ({"base": TINY | {"tags": ["x"]}, "grid": {"tags": [["a", "b\x00"]]}}, "grid.tags.0"),
        ({"base": TINY, "grid": {"seed": [0]}, "fits": [{"y": "delta\x00", "x": "seed"}]}, "fits.0.y"),
        (
            {"base": TINY, "grid": {"seed": [0]}, "fits": [{"y": "d", "x": "seed", "group_by": ["a\x00"]}]},
            "fits.0.group_by.0",
        ),
    ],
    ids=[
        "sweep-name",
        "sweep-tag",
        "grid-value",
        "grid-value-of-a-tag",
        "base-name",
        "grid-list-value",
        "fit-name",
        "fit-group",
    ],
)
def test_a_nul_in_a_sweep_string_is_a_422_naming_it_and_nothing_is_stored(client, db, body, field):
    assert field in fields(problem(client.post("/v1/sweeps", json=body), 422))
    assert (stored(db, Sweep), stored(db, Job)) == (0, 0)


def test_a_nul_in_a_job_name_or_tag_is_a_422_naming_it(client, db):
    body = problem(client.post("/v1/jobs", json=TINY | {"name": "a\x00", "tags": ["b", "c\x00"]}), 422)
    assert {"name", "tags.1"} <= fields(body)
    assert stored(db, Job) == 0


def test_a_nul_in_an_upload_name_field_is_a_422_naming_it(client, db):
    arrays = npz(x=np.zeros((3, 2)), y=np.zeros(3))
    answer = client.post("/v1/datasets", files={"file": ("d.npz", arrays)}, data={"name": "da\x00ta"})
    assert "name" in fields(problem(answer, 422))
    assert stored(db, Dataset) == 0


def test_any_valid_unicode_is_stored_and_read_back_as_sent(client):
    name, tags = "ΔK — 幅 🧪 \u200b$x^$", ["🧪", "ok\u00e9"]
    job = client.post("/v1/jobs", json=TINY | {"name": name, "tags": tags})
    assert job.status_code == 202, job.text
    assert (job.json()["name"], job.json()["tags"]) == (name, tags)
    assert client.get(f"/v1/jobs/{job.json()['id']}").json()["tags"] == sorted(tags)
    sweep = client.post(
        "/v1/sweeps", json={"name": name, "tags": tags[:1], "base": TINY, "grid": {"name": [name, "b"]}}
    )
    assert sweep.status_code == 202, sweep.text
    assert client.get(f"/v1/sweeps/{sweep.json()['id']}").json()["name"] == name


# --------------------------------------------------------------------------- plot labels


def finish_sweep_jobs(client, db, sweep_id: str, y: str) -> None:
    """What a worker would write: every job succeeded, with summary[y] = 1/width."""
    sweep_succeeded(db, sweep_id, lambda spec: {y: 1.0 / spec["model"]["hidden"][0]})


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_mathtext_in_fit_names_and_group_values_is_drawn_as_text(client, db, fmt):
    """`$x^$` is not valid mathtext: as a label (axis, legend entry) it made matplotlib raise, a 500."""
    spec = {
        "base": TINY,
        "grid": {"model.hidden.0": [2, 4, 8], "name": ["$a$", "$b^$"]},
        "fits": [{"y": "$x^$", "x": "model.hidden.0", "group_by": ["name"]}],
    }
    sweep = client.post("/v1/sweeps", json=spec)
    assert sweep.status_code == 202, sweep.text
    finish_sweep_jobs(client, db, sweep.json()["id"], "$x^$")
    fits = client.get(f"/v1/sweeps/{sweep.json()['id']}").json()["fits"]
    assert all(fit["slope"] is not None and "$x^$" in fit["verdict"] for fit in fits), "the legend has these labels"
    plot = client.get(f"/v1/sweeps/{sweep.json()['id']}/plot", params={"format": fmt})
    assert plot.status_code == 200, plot.text
    assert plot.content.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in plot.content[:400]
    other = client.get(f"/v1/sweeps/{sweep.json()['id']}/plot", params={"x": "model.hidden.0", "y": "$\\frac{$"})
    assert other.status_code == 200, other.text

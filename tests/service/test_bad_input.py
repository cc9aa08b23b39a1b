"""Bad input gets a clear 4xx problem naming the field (and for caps the limit and the value), never a 500.

The `client` fixture re-raises any exception that would have become a 500, so a malformed
request reaching the catch-all handler fails these tests instead of passing quietly.
"""

from __future__ import annotations

import base64
import json
import math

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as fuzzing
from hypothesis import strategies as st
from sqlalchemy import func, select

from ntklab.service.api.routes import FiniteJSONResponse
from ntklab.service.app import create_app
from ntklab.store.models import Job

PROBLEM = "application/problem+json"
GAUSSIAN = {"kind": "gaussian_mixture", "n_train": 20, "input_dim": 16, "classes": 2, "probe": {"n": 4}}
CAPS = {
    "max_width": 100,
    "max_parameters": 1000,
    "max_probe": 8,
    "max_train_points": 50,
    "max_steps": 100,
    "max_inline_values": 20,
    "max_kernel_entries": 1600,
    "max_lanczos_entries": 100 * 192,  # the default 100 Lanczos steps on small()'s 192 parameters, exactly
}


def problem(answer, status: int) -> dict:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == PROBLEM
    body = answer.json()
    assert body["status"] == status and body["title"] and body["detail"]
    return body


def fields(body: dict) -> dict[str, dict]:
    return {error["field"]: error for error in body["errors"]}


def post_raw(client, content: bytes, content_type: str = "application/json"):
    return client.post("/v1/jobs", content=content, headers={"content-type": content_type})


# --------------------------------------------------------------------------- resource caps


@pytest.fixture
def capped(client_with) -> TestClient:
    return client_with(**CAPS)


def small(**parts) -> dict:
    return {"model": {"hidden": [10]}, "data": GAUSSIAN, "training": {"max_steps": 50}} | parts


@pytest.mark.parametrize(
    ("spec", "field", "limit", "value"),
    [
        (small(model={"hidden": [50, 150]}), "model.hidden.1", 100, 150),
        (small(model={"hidden": [60]}), "model", 1000, 16 * 60 + 60 + 60 * 2 + 2),
        (small(data=GAUSSIAN | {"probe": {"n": 10}}), "data.probe.n", 8, 10),
        (small(data=GAUSSIAN | {"probe": {"n": None}}), "data.probe.n", 8, 20),
        (small(data=GAUSSIAN | {"n_train": 60}), "data.n_train", 50, 60),
        (small(training={"max_steps": 101}), "training.max_steps", 100, 101),
        (small(data={"kind": "inline", "x": [[0.0] * 3] * 5, "y": [[0.0] * 2] * 5, "probe": {"n": 2}}), "data", 20, 25),
        (small(data=GAUSSIAN | {"classes": 8, "probe": {"n": 8}}), "data.probe.n", 1600, 4096),
        (small(diagnostics={"hessian": {"iterations": 101}}), "diagnostics.hessian.iterations", 100 * 192, 101 * 192),
    ],
    ids=[
        "width",
        "parameters",
        "probe",
        "default-probe",
        "train-points",
        "steps",
        "inline-values",
        "kernel-entries",
        "lanczos-basis",
    ],
)
def test_each_cap_is_a_422_naming_field_limit_and_value(capped, spec, field, limit, value):
    body = problem(capped.post("/v1/jobs", json=spec), 422)
    assert body["type"] == "urn:ntklab:problem:resource-cap"
    assert fields(body)[field] | {"message": ""} == {"field": field, "message": "", "limit": limit, "value": value}
    assert str(value - limit) in fields(body)[field]["message"], "the message says by how much"


def test_a_spec_within_every_cap_is_accepted(capped):
    assert capped.post("/v1/jobs", json=small()).status_code == 202


def test_every_exceeded_cap_is_listed_at_once(capped):
    spec = small(model={"hidden": [500]}, training={"max_steps": 1000}, data=GAUSSIAN | {"n_train": 99})
    assert set(fields(problem(capped.post("/v1/jobs", json=spec), 422))) == {
        "model.hidden.0",
        "training.max_steps",
        "data.n_train",
    }


def test_too_many_active_jobs_is_a_429_with_retry_after(client_with, db):
    client = client_with(max_queued_jobs_per_key=3)
    ids = [client.post("/v1/jobs", json=small()).json()["id"] for _ in range(3)]
    body = problem(answer := client.post("/v1/jobs", json=small()), 429)
    assert int(answer.headers["retry-after"]) >= 1
    assert fields(body)["active_jobs"]["limit"] == 3 and fields(body)["active_jobs"]["value"] == 3
    client.post(f"/v1/jobs/{ids[0]}/cancel")
    assert client.post("/v1/jobs", json=small()).status_code == 202
    assert db.scalar(select(func.count()).select_from(Job)) == 4


def test_a_10_mb_body_is_a_413_before_parsing(client):
    body = problem(post_raw(client, b"{" * (10 * 1024 * 1024)), 413)
    assert body["type"] == "urn:ntklab:problem:body-too-large"
    assert fields(body)["body"]["limit"] == 8 * 1024 * 1024
    assert fields(body)["body"]["value"] == 10 * 1024 * 1024


def test_a_streamed_body_without_length_is_cut_at_the_cap(client_with):
    client = client_with(max_body_bytes=1000)
    chunks = (b" " * 300 for _ in range(10))
    body = problem(client.post("/v1/jobs", content=chunks, headers={"content-type": "application/json"}), 413)
    assert fields(body)["body"]["limit"] == 1000 and fields(body)["body"]["value"] > 1000
    small_enough = (part for part in (b'{"training": ', b'{"max_steps": 10}}'))
    assert (
        client.post("/v1/jobs", content=small_enough, headers={"content-type": "application/json"}).status_code == 202
    )


# --------------------------------------------------------------------------- malformed bodies


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": ',
        b"{'single': 1}",
        b'{"a": 1,}',
        b"\xff\xfe\x00garbage",
        b"[" * 100_000,
        b"nul",
        b'{"seed": 1' + b"0" * 5000 + b"}",
    ],
    ids=["truncated", "single-quotes", "trailing-comma", "not-utf8", "deep", "bare-word", "5000-digit-int"],
)
def test_malformed_json_is_a_400(client, raw):
    assert problem(post_raw(client, raw), 400)["type"] == "urn:ntklab:problem:malformed-json"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"data": {"kind": "inline", "x": [[1, NaN]], "y": [1]}}', "data.x.0.1"),
        (b'{"data": {"kind": "inline", "x": [[1], [2]], "y": [1, Infinity]}}', "data.y.1"),
        (b'{"training": {"lr": -Infinity}}', "training.lr"),
        (b'{"seed": NaN}', "seed"),
        (b'{"training": {"lr": 1e400}}', "training.lr"),
    ],
)
def test_nan_and_infinity_are_refused_naming_the_field(client, raw, field):
    body = problem(post_raw(client, raw), 422)
    assert field in fields(body)
    assert "value" not in fields(body)[field], "a non-finite value is never echoed"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"bogus": 1}, "bogus"),
        ({"model": {"hidden": [10], "widht": 3}}, "model.widht"),
        ({"data": {"kind": "gaussian_mixture", "n_train": 0}}, "data.n_train"),
        ({"data": {"kind": "inline", "y": [1]}}, "data.x"),
        ({"data": {"kind": "inline", "x": [[1.0]], "y": [[1.0], "a"]}}, "data.y.1"),
        ({"data": {"kind": "no-such-kind"}}, "data.kind"),
        ({"training": {"lr": "fast"}}, "training.lr"),
        ({"model": {"hidden": [10, 0]}}, "model.hidden.1"),
        ({"model": {"hidden": [10, 10], "activation": ["relu", "nope"]}}, "model.activation.1"),
        ({"name": json.loads("[" * 500 + "]" * 500)}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"tags": ["ok"] * 33}, "tags"),
        ({"name": "a\u0000b"}, "name"),
        ({"tags": ["fine", "nul\u0000"]}, "tags.1"),
    ],
)
def test_invalid_specs_are_a_422_naming_the_field(client, db, spec, field):
    body = problem(client.post("/v1/jobs", json=spec), 422)
    assert field in fields(body), body
    assert db.scalar(select(func.count()).select_from(Job)) == 0, "nothing is stored"


@pytest.mark.parametrize("raw", [b"", b"[]", b"3", b'"spec"', b"null"])
def test_a_body_that_is_not_an_object_is_a_422(client, raw):
    assert set(fields(problem(post_raw(client, raw), 422))) == {"body"}


def test_a_body_that_is_not_json_is_a_415(client):
    assert problem(post_raw(client, b"model=mlp", "application/x-www-form-urlencoded"), 415)["type"].endswith(
        "media-type"
    )


def test_an_overlong_idempotency_key_is_a_422_naming_the_header(client):
    body = problem(client.post("/v1/jobs", json={}, headers={"Idempotency-Key": "k" * 201}), 422)
    assert fields(body)["Idempotency-Key"]["limit"] == 200


# --------------------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=abc", "limit"),
        ("limit=1000", "limit"),
        (f"limit={10**30}", "limit"),
        ("status=bogus", "status.0"),
        ("tag=" + "t" * 65, "tag"),
    ],
)
def test_bad_list_queries_are_a_422_naming_the_parameter(client, query, field):
    assert field in fields(problem(client.get(f"/v1/jobs?{query}"), 422))


@pytest.mark.parametrize("after", ["not-a-cursor", "c2VxOi0x"])
def test_a_cursor_that_does_not_decode_is_a_400_naming_after(client, after):
    assert "after" in fields(problem(client.get("/v1/jobs", params={"after": after}), 400))


def cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize("list_path", ["/v1/jobs", "/v1/datasets", "/v1/models"])
@pytest.mark.parametrize("forged", ["seq:2147483648", "seq:0", "seq:99999999999999999", "seq:" + "9" * 40])
def test_a_forged_cursor_outside_the_seq_column_is_a_400_naming_after(client, list_path, forged):
    """seq is an SQL INTEGER: PostgreSQL refused to compare it with 2^31 (a 500); SQLite answered an empty page."""
    assert "after" in fields(problem(client.get(list_path, params={"after": cursor(forged)}), 400))


def test_the_largest_seq_a_cursor_may_name_pages_normally(client):
    client.post("/v1/jobs", json={"training": {"max_steps": 1}})
    page = client.get("/v1/jobs", params={"after": cursor("seq:2147483647")})
    assert page.status_code == 200 and len(page.json()["data"]) == 1


@pytest.mark.parametrize("path", ["/v1/jobs/", "/v1/jobs/job_x/", "/v1/sweeps/", "/healthz/"])
def test_a_trailing_slash_is_a_404_problem_never_a_redirect_to_the_host_header(client, path):
    answer = client.get(path, headers={"host": "evil.example"}, follow_redirects=False)
    problem(answer, 404)
    assert "location" not in answer.headers


@pytest.mark.parametrize(
    "url", ["/v1/jobs/job%00x", "/v1/jobs?tag=a%00b", "/v1/jobs/x/metrics?names=a%00", "/v1/jobs/x/artifacts/a%00.npy"]
)
def test_nul_characters_in_urls_are_a_400(client, url):
    assert problem(client.get(url), 400)["type"] == "urn:ntklab:problem:nul-character"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/jobs", "GET, POST"),
        ("PATCH", "/v1/jobs/job_x", "GET, DELETE"),
        ("PUT", "/v1/jobs/job_x/artifacts/a.npy", "GET, HEAD"),
        ("OPTIONS", "/v1/datasets", "GET, POST"),
    ],
)
def test_a_405_allows_every_method_the_path_answers(client, method, path, allow):
    """Starlette's Allow named the methods of the first route at the path only (found by schemathesis --checks all)."""
    answer = client.request(method, path)
    problem(answer, 405)
    assert answer.headers["allow"] == allow


def test_unknown_routes_and_methods_are_problems(client):
    problem(client.get("/v2/jobs"), 404)
    answer = client.put("/v1/jobs")
    problem(answer, 405)
    assert "POST" in answer.headers["allow"]


# --------------------------------------------------------------------------- the last line of defence


def test_an_unexpected_error_is_a_500_problem_that_leaks_nothing(settings):
    app = create_app(settings)

    @app.get("/boom")
    def boom():
        raise RuntimeError("secret-connection-string")

    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.get("/boom")
    body = problem(answer, 500)
    assert body["type"] == "urn:ntklab:problem:internal"
    assert "secret" not in answer.text and "RuntimeError" not in answer.text


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_the_json_encoder_refuses_non_finite_numbers(number):
    with pytest.raises(ValueError):
        FiniteJSONResponse({"summary": {"delta_k_max": number}})


# --------------------------------------------------------------------------- fuzzing


SPEC_WORDS = [
    "model",
    "data",
    "training",
    "diagnostics",
    "hidden",
    "kind",
    "x",
    "y",
    "name",
    "tags",
    "seed",
    "probe",
    "n",
    "lr",
    "max_steps",
    "inline",
    "gaussian_mixture",
    "builtin",
    "activation",
    "kernel",
    "hessian",
    "mlp",
    "cnn",
]
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(SPEC_WORDS)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(SPEC_WORDS) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


@fuzzing(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.dictionaries(st.sampled_from(SPEC_WORDS), JSON_VALUES, max_size=5))
def test_random_json_bodies_never_get_a_5xx(client, body):
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code in (202, 422), answer.text
    if answer.status_code == 422:
        assert answer.headers["content-type"] == PROBLEM and answer.json()["errors"]

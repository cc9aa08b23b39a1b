"""The hostile requests of issues #10 and #25, kept in regressions.json, replayed against the app on SQLite and PostgreSQL.

Each answer must have the status the file expects, never a 5xx; a 4xx is application/problem+json
(with a body naming its status, except for HEAD). The app runs in process with auth on (an admin
key is sent unless the entry sends its own), 3 failed key checks per address and minute, and
server errors answered as 500s so that they are seen here as statuses. Fixtures stand for the
placeholders: {job} is a job with the artifact kernel_init.npy, {sweep} a sweep of two widths
whose fit is named `$x^$`.
"""

from __future__ import annotations

import io
import json
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from onnx import TensorProto, helper, numpy_helper

from ntklab import localstack
from ntklab.config.settings import Settings
from ntklab.service.app import create_app
from tests.service.test_datasets_api import npy, npy_header
from tests.stored_artifacts import add_artifact

REGRESSIONS = json.loads((Path(__file__).parent / "regressions.json").read_text())["requests"]
ADMIN_KEY = "ntk_" + "r" * 43
PROBLEM = "application/problem+json"
TINY = {
    "model": {"hidden": [4]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 2},
    "training": {"max_steps": 1},
}


def inline_sweep_100_seeds() -> bytes:
    """Issue #10 item 1: a 4 MB sweep, inline data of 1000 points × 999 features and a grid of 100 seeds."""
    rows = ",".join("[" + ",".join(str((i * 31 + j * 17) % 10 / 10) for j in range(999)) + "]" for i in range(1000))
    targets = ",".join(str(i % 2) for i in range(1000))
    base = f'{{"data": {{"kind": "inline", "x": [{rows}], "y": [{targets}]}}, "training": {{"max_steps": 10}}}}'
    return f'{{"base": {base}, "grid": {{"seed": {list(range(100))}}}}}'.encode()


def _onnx(nodes: list, initializers: list, *, opsets=(("", 17),), d: int = 3, out: int = 3) -> bytes:
    graph = helper.make_graph(
        nodes,
        "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", out])],
        initializers,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid(*o) for o in opsets], ir_version=8
    ).SerializeToString()


def _reads(name: str) -> list:
    return [
        helper.make_node("ReduceSum", [name], ["total"], keepdims=0),
        helper.make_node("Mul", ["x", "total"], ["y"]),
    ]


def onnx_doubling_chain() -> bytes:
    """Issue #25 item 1: 4 KB of protobuf, a Constant of 1024 floats doubled by Concat 30 times (2⁴⁰ floats)."""
    nodes = [helper.make_node("Constant", [], ["c0"], value=numpy_helper.from_array(np.ones(1024, np.float32)))]
    nodes += [helper.make_node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0) for i in range(30)]
    return _onnx(nodes + _reads("c30"), [])


def onnx_squared_constant() -> bytes:
    """Issue #25 item 1: a constant 2048 × 2048 matrix squared 8 times (2·2048³ FLOPs each, past max_folding_flops)."""
    shape = numpy_helper.from_array(np.array([2048, 2048], np.int64), "shape")
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["m0"], value=numpy_helper.from_array(np.ones(1, np.float32)))
    ]
    nodes += [helper.make_node("MatMul", [f"m{i}", f"m{i}"], [f"m{i + 1}"]) for i in range(8)]
    return _onnx(nodes + _reads("m8"), [shape])


def onnx_many_initializers() -> bytes:
    """Issue #25 item 5: 6 000 Add nodes with 6 000 bias initializers, past max_model_nodes (10 000) only if both count."""
    nodes, initializers, previous = [], [], "x"
    for i in range(6000):
        initializers.append(numpy_helper.from_array(np.full(3, 1e-3, np.float32), f"b{i}"))
        nodes.append(helper.make_node("Add", [previous, f"b{i}"], [f"h{i}"]))
        previous = f"h{i}"
    return _onnx([*nodes, helper.make_node("Identity", [previous], ["y"])], initializers)


def onnx_opset_9999() -> bytes:
    """Issue #25 item 10: an opset no onnx knows."""
    return _onnx([helper.make_node("Identity", ["x"], ["y"])], [], opsets=(("", 9999),))


def onnx_two_default_opsets() -> bytes:
    """Issue #25 item 10: '' and 'ai.onnx' imported at different versions."""
    return _onnx([helper.make_node("Identity", ["x"], ["y"])], [], opsets=(("", 17), ("ai.onnx", 13)))


def onnx_impossible_reshape() -> bytes:
    """Issue #25 item 10: [batch, 12] reshaped to rows of 7."""
    target = numpy_helper.from_array(np.array([-1, 7], np.int64), "target")
    return _onnx([helper.make_node("Reshape", ["x", "target"], ["y"])], [target], d=12, out=7)


def nested_residuals(depth: int) -> bytes:
    """Issue #25 item 6: residuals nested `depth` deep."""
    layers = '[{"type":"residual","layers":' * depth + '[{"type":"dense","width":4}]' + "}]" * depth
    return (
        f'{{"model": {{"kind": "graph", "layers": {layers}}}, "data": {{"kind": "gaussian_mixture", "n_train": 8, '
        f'"input_dim": 4}}, "training": {{"max_steps": 1}}}}'
    ).encode()


def npz_65_dimensions() -> bytes:
    """Issue #25 item 10: a float x [2, 1, …, 1, 3] with 65 dimensions (numpy holds 64): a 500 before."""
    x = npy_header((2, *(1,) * 63, 3), "<f8") + np.zeros(6).tobytes()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as packed:
        packed.writestr("x.npy", x)
        packed.writestr("y.npy", npy(np.zeros(2)))
    return archive.getvalue()


def npz_bomb() -> bytes:
    """Issue #25 item 8: a ~300 KiB .npz whose x declares 100 000 × 400 float64 zeros (305 MiB), past max_upload_bytes
    (256 MiB), written through zipfile's streaming writer (no large array is made)."""
    points, width = 100_000, 400
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as packed:
        with packed.open("x.npy", "w", force_zip64=True) as member:
            member.write(npy_header((points, width), "<f8"))
            row_block = bytes(8 * width * 1000)
            for _ in range(points // 1000):
                member.write(row_block)
        packed.writestr("y.npy", npy(np.zeros(points)))
    return archive.getvalue()


GENERATED = {
    "inline_sweep_100_seeds": inline_sweep_100_seeds,
    "onnx_doubling_chain": onnx_doubling_chain,
    "onnx_squared_constant": onnx_squared_constant,
    "onnx_many_initializers": onnx_many_initializers,
    "onnx_opset_9999": onnx_opset_9999,
    "onnx_two_default_opsets": onnx_two_default_opsets,
    "onnx_impossible_reshape": onnx_impossible_reshape,
    "nested_residuals_126": lambda: nested_residuals(126),
    "nested_residuals_250": lambda: nested_residuals(250),
    "nested_residuals_100": lambda: nested_residuals(100),
    "npz_65_dimensions": npz_65_dimensions,
    "npz_bomb": npz_bomb,
}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("regressions")
    if request.param == "sqlite":
        url = f"sqlite:///{root / 'ntklab.db'}"
        localstack.migrate(url)
    else:
        url = request.getfixturevalue("postgres_url")
    settings = Settings(
        database_url=url,
        broker_url="filesystem://",
        broker_dir=root / "broker",
        queue=f"regressions-{uuid.uuid4().hex[:8]}",
        public_url="http://testserver",
        reaper_enabled=False,
        auth="on",
        bootstrap_admin_key=ADMIN_KEY,
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
        add_artifact(session, job.json()["id"], "kernel_init.npy", "application/octet-stream", b"abc")
    sweep = client.post(
        "/v1/sweeps",
        json={"base": TINY, "grid": {"model.hidden.0": [2, 4]}, "fits": [{"y": "$x^$", "x": "model.hidden.0"}]},
    )
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
    peer = (
        TestClient(client.app, client=(entry["client"], 50000), raise_server_exceptions=False)
        if "client" in entry
        else client
    )
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

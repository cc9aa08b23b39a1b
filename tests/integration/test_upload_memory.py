"""The API's memory for ONNX uploads is bounded whatever the number in flight (issue 25, item 7).

A real API (uvicorn, one process, auth on, SQLite) receives 16 uploads of a 187 MiB ONNX model at once from
four keys (four each, max_concurrent_uploads_per_key). Before the fix one check held about 4.8 copies of the
file (read, parse, onnx.checker's and shape inference's serialised copies: 935 MiB growth for one 187 MiB
file) and the 16 ran together. Now the checker and shape inference see a copy without the weights, parsing
holds the bytes and the parsed model only while it runs, and files of 16 MiB or more are checked
max_concurrent_model_checks (2) at a time (service/model_checks.py). The API's peak resident size
(VmHWM of the uvicorn process) must stay under baseline + 2 turns × 2 copies × the file + 256 MiB for
everything else (request buffers, SQLite pages); every upload answers 201 or 200.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ntklab.localstack import LocalStack
from ntklab.store import api_keys
from ntklab.store.db import make_engine, make_session_factory

pytestmark = [pytest.mark.slow, pytest.mark.stack]

WIDTH = 7000  # a [7000, 7000] float32 weight: 187 MiB
UPLOADS, KEYS = 16, 4


def big_model(path: Path) -> int:
    weight = np.random.default_rng(0).standard_normal((WIDTH, WIDTH), dtype=np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Tanh", ["h"], ["t"]),
        helper.make_node("MatMul", ["t", "head"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.ones((WIDTH, 3), np.float32), "head")],
    )
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    )
    return path.stat().st_size


def peak_resident_bytes(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def test_sixteen_concurrent_large_uploads_keep_the_api_under_its_budget(sqlite_stack, tmp_path):
    size = big_model(tmp_path / "wide.onnx")
    environment = sqlite_stack | {"NTKLAB_AUTH": "on", "NTKLAB_MAX_UPLOAD_BYTES": str(256 * 2**20)}
    stack = LocalStack(environment, tmp_path)
    try:
        stack.start_api()
        engine = make_engine(sqlite_stack["NTKLAB_DATABASE_URL"])
        with make_session_factory(engine)() as session:
            keys = [api_keys.create_key(session, f"k{i}").secret for i in range(KEYS)]
        engine.dispose()
        baseline, _ = peak_resident_bytes(stack.api.pid)

        def upload(index: int) -> int:
            with open(tmp_path / "wide.onnx", "rb") as file, httpx.Client(base_url=stack.url, timeout=600) as client:
                answer = client.post(
                    "/v1/models",
                    content=file,
                    headers={"X-API-Key": keys[index % KEYS], "Content-Type": "application/octet-stream"},
                )
            return answer.status_code

        with ThreadPoolExecutor(UPLOADS) as pool:
            statuses = list(pool.map(upload, range(UPLOADS)))
        _, peak = peak_resident_bytes(stack.api.pid)
    finally:
        stack.stop()
    budget = baseline + 2 * 2 * size + 256 * 2**20
    print(
        f"\n16 uploads of {size / 2**20:.0f} MiB: API resident {baseline / 2**20:.0f} MiB before, peak "
        f"{peak / 2**20:.0f} MiB (growth {(peak - baseline) / 2**20:.0f} MiB); budget {budget / 2**20:.0f} MiB"
    )
    assert sorted(set(statuses)) <= [200, 201] and statuses.count(201) == KEYS, statuses
    assert peak <= budget

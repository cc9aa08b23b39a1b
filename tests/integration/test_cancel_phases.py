"""A cancel lands within 5 s in every phase of a job (issue 25, item 4), through a real API and `celery worker`
on PostgreSQL + Redis.

Each job below is sized so that one phase alone runs well past 5 s on a loaded 2-core machine. The test
waits until the job reports that phase (progress.phase), lets it run SETTLE_S more, cancels through the
API and times the job to `cancelled`. Where the phase reaches a checkpoint (engine/callbacks.py:
a training step, a block of kernel columns, a batch of Hessian-vector products, a layer of the limit
kernel, a node of an ONNX conversion) the engine stops and the worker's pool process serves on. A job
stuck in one native call (eigvalsh of a 4096 × 4096 kernel) reaches none: job_cancel_grace_s after its
worker saw the cancel, the row is stored cancelled and the pool process is killed and replaced.

Run with -s to see each phase's latency (docs/operations.md quotes them).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ntklab.localstack import LocalStack, StackError
from tests.faults.jobs import job, submit

pytestmark = [pytest.mark.slow, pytest.mark.stack]

CANCEL_LIMIT_S = 5.0
SETTLE_S = 1.0
FOLDED, FOLDS = 2048, 60  # the ONNX graph folds 60 products of 2048 × 2048 constants when it is converted
STACK_SETTINGS = {
    "NTKLAB_HEARTBEAT_INTERVAL_S": "2.0",
    "NTKLAB_HEARTBEAT_STALE_S": "30",  # the defaults: a cancel is seen within 0.5 s
    "NTKLAB_MAX_FOLDING_FLOPS": "1e13",
    "NTKLAB_MAX_FOLDED_CONSTANT_BYTES": str(8 * 2**30),
    "NTKLAB_MAX_KERNEL_ENTRIES": str(8192**2),  # the stuck job's K [8192, 8192]
}
QUIET = {"layer_sensitivity": False, "save_kernels": [], "save_weights": False}
LATENCIES: dict[str, float] = {}


def mixture(n_train: int, input_dim: int, classes: int, probe: int) -> dict:
    return {
        "kind": "gaussian_mixture",
        "n_train": n_train,
        "input_dim": input_dim,
        "classes": classes,
        "probe": {"n": probe},
    }


PHASES = {
    # full-batch GD for two minutes
    "train": {
        "model": {"hidden": [64]},
        "data": mixture(16, 4, 2, 4),
        "training": {"max_steps": 200_000, "lr": 0.05, "target_loss": None, "time_budget_s": 120},
        "diagnostics": {"kernel": {"schedule": "every", "every": 100}, "hessian": None, **QUIET},
    },
    # K at init by NTK-vector products: 1500 columns, 10+ s
    "kernel": {
        "model": {"hidden": [256, 256]},
        "data": mixture(150, 32, 10, 150),
        "training": {"max_steps": 3, "lr": 0.01},
        "diagnostics": {"kernel": {"method": "ntk_vp"}, "hessian": None, **QUIET},
    },
    # Lanczos to the cap on 16 points × 10 outputs: 80 000 Hessian-vector products
    "hessian": {
        "model": {"hidden": [256, 256]},
        "data": mixture(64, 32, 10, 16),
        "training": {"max_steps": 3, "lr": 0.01},
        "diagnostics": {
            "kernel": None,
            "hessian": {"at": ["init"], "probe_points": 16, "iterations": 500, "tolerance": 0},
            **QUIET,
        },
    },
    # SLQ of the loss Hessian: 200 probes × 200 Lanczos steps
    "hessian_spectrum": {
        "model": {"hidden": [256, 256]},
        "data": mixture(256, 32, 10, 16),
        "training": {"max_steps": 3, "lr": 0.01},
        "diagnostics": {
            "kernel": None,
            "hessian": None,
            "hessian_spectrum": {"of": "loss", "at": ["init"], "probes": 200, "lanczos_steps": 200},
            **QUIET,
        },
    },
    # Θ∞ of a 12-layer CNN on 10 × 10 images: 24² point pairs × 100² position pairs, about 1 s a map, 25 maps
    "infinite_width": {
        "model": {"kind": "cnn", "hidden": [8] * 12, "input_shape": [1, 10, 10], "readout": "flatten"},
        "data": mixture(24, 100, 2, 24),
        "training": {"max_steps": 2, "lr": 0.01},
        "diagnostics": {
            "kernel": None,
            "hessian": None,
            "infinite_width": {},
            "linearization_error": False,
            "weight_change": False,
            **QUIET,
        },
    },
}


def started(settings: dict[str, str], logs: Path) -> LocalStack:
    live = LocalStack(settings | STACK_SETTINGS, logs)
    try:
        live.start_api()
        live.start_worker()
    except StackError as error:
        live.stop()
        pytest.fail(str(error), pytrace=False)
    return live


@pytest.fixture(scope="module")
def stack(postgres_redis_stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """PostgreSQL + Redis: every phase."""
    live = started(postgres_redis_stack, tmp_path_factory.mktemp("logs"))
    yield live
    live.stop()
    print(
        "\ncancel latency by phase (s): " + ", ".join(f"{phase} {seconds:.2f}" for phase, seconds in LATENCIES.items())
    )


@pytest.fixture(scope="module")
def embedded_stack(sqlite_stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """SQLite + the filesystem broker: the process replacement, whose message is redelivered by that broker."""
    live = started(sqlite_stack, tmp_path_factory.mktemp("logs"))
    yield live
    live.stop()


def wait_for(stack: LocalStack, job_id: str, done, timeout_s: float) -> dict:
    """tests.faults.jobs.wait_for, failing at once when the job ends before `done` holds."""
    deadline = time.monotonic() + timeout_s
    current = job(stack, job_id)
    while not done(current):
        if time.monotonic() > deadline or current["status"] in ("succeeded", "failed", "cancelled"):
            pytest.fail(
                f"job {job_id} after {timeout_s} s: {current['status']} {current['progress']} {current['error']}"
            )
        time.sleep(0.05)
        current = job(stack, job_id)
    return current


def pool_processes(stack: LocalStack) -> list[int]:
    pid = stack.workers[0].pid
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def cancel_in(
    stack: LocalStack, job_id: str, phase: str, label: str | None = None, settle_s: float = SETTLE_S
) -> tuple[dict, float]:
    """Wait until the job runs `phase`, settle_s more, cancel it; the finished job and seconds from the request to
    `cancelled`, recorded in LATENCIES under `label` (default: the phase)."""
    wait_for(stack, job_id, lambda j: j["status"] == "running" and j["progress"]["phase"] == phase, timeout_s=90)
    time.sleep(settle_s)
    assert job(stack, job_id)["progress"]["phase"] == phase, "the phase ended before the cancel: size the job up"
    asked = time.monotonic()
    assert stack.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    deadline = asked + 3 * CANCEL_LIMIT_S
    while (current := job(stack, job_id))["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.02)
    LATENCIES[label or phase] = latency = time.monotonic() - asked
    return current, latency


@pytest.mark.parametrize("phase", list(PHASES))
def test_a_cancel_lands_within_seconds_in_each_phase(stack, phase):
    pool = pool_processes(stack)
    done, latency = cancel_in(stack, submit(stack, {"seed": 0, **PHASES[phase]}), phase)
    assert done["status"] == "cancelled" and latency < CANCEL_LIMIT_S, (phase, done["status"], latency)
    assert done["error"] is None
    assert pool_processes(stack) == pool, "the engine stopped at a checkpoint; its process serves on"


def folding_chain_onnx(width: int, folds: int) -> bytes:
    """x [n, width] → x·Q^(folds+1) → a dense readout [n, 2], Q an orthogonal Constant: converting it folds
    `folds` products of width × width constants (2·width³ FLOPs each)."""
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(width, width)))
    nodes = [helper.make_node("Constant", [], ["c0"], value=numpy_helper.from_array(q.astype(np.float32), "q"))]
    nodes += [helper.make_node("MatMul", [f"c{k}", "c0"], [f"c{k + 1}"], name=f"fold{k}") for k in range(folds)]
    nodes += [
        helper.make_node("MatMul", ["x", f"c{folds}"], ["h"], name="rotate"),
        helper.make_node("Gemm", ["h", "w", "b"], ["y"], transB=1, name="readout"),
    ]
    readout = (np.random.default_rng(1).normal(size=(2, width)) / np.sqrt(width)).astype(np.float32)
    graph = helper.make_graph(
        nodes,
        "folding-chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(readout, "w"), numpy_helper.from_array(np.zeros(2, np.float32), "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_a_cancel_lands_within_seconds_while_an_onnx_model_is_converted(stack):
    uploaded = stack.client.post(
        "/v1/models", content=folding_chain_onnx(FOLDED, FOLDS), headers={"Content-Type": "application/octet-stream"}
    )
    assert uploaded.status_code == 201, uploaded.text
    pool = pool_processes(stack)
    spec = {
        "seed": 0,
        "dtype": "float32",
        "model": {"kind": "onnx", "id": uploaded.json()["id"]},
        "data": mixture(8, FOLDED, 2, 4),
        "training": {"max_steps": 3, "lr": 0.01},
        "diagnostics": {"kernel": None, "hessian": None, **QUIET},
    }
    done, latency = cancel_in(stack, submit(stack, spec), "build", "build (ONNX conversion)")
    assert done["status"] == "cancelled" and latency < CANCEL_LIMIT_S, (done["status"], latency)
    assert pool_processes(stack) == pool, "the conversion stopped at a checkpoint; its process serves on"


@pytest.mark.parametrize("backing", ["stack", "embedded_stack"])
def test_a_job_stuck_in_one_native_call_is_cancelled_and_its_process_replaced(backing, request):
    """lr = auto takes λ_max of the probe kernel K [8192, 8192] at init (1024 points × 8 outputs): one eigvalsh of
    10–17 s on this machine when it is quiet, with no checkpoint inside, after K itself (about a second for this
    float32 width-16 MLP); the cancel comes 4 s into the phase, the kill 2.5 s later. With K [4096, 4096] the
    eigvalsh took 1.7–2.3 s, shorter than the cancel's delay plus the grace, and in a quiet CI run the job
    stopped at the next checkpoint instead (its process kept): the test depended on the machine's load."""
    stack = request.getfixturevalue(backing)
    [stuck] = pool_processes(stack)
    spec = {
        "seed": 0,
        "dtype": "float32",
        "model": {"hidden": [16]},
        "data": mixture(1024, 8, 8, 1024),
        "training": {"max_steps": 3, "lr": "auto"},
        "diagnostics": {"kernel": None, "hessian": None, **QUIET},
    }
    done, latency = cancel_in(
        stack, submit(stack, spec), "kernel", f"kernel, one native call (process replaced, {backing})", settle_s=4.0
    )
    assert done["status"] == "cancelled" and latency < CANCEL_LIMIT_S, (done["status"], latency)
    assert done["progress"]["phase"] == "cancelled" and done["attempts"] == 1

    after = submit(stack, {"seed": 1, **PHASES["train"], "training": {"max_steps": 20, "lr": 0.05}})
    finished = wait_for(stack, after, lambda j: j["status"] == "succeeded", timeout_s=120)
    assert finished["attempts"] == 1
    assert stuck not in pool_processes(stack), "a fresh pool process served the next job"
    assert job(stack, done["id"])["status"] == "cancelled", "not run again"

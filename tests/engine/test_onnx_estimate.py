"""An uploaded ONNX model's estimate against what the worker does with it, for the graph of issue 25 item 1.

The model (built here, 270 KB): a Concat doubling chain from a 1024-float Constant (14 doublings, 256 MiB
of float64 constants), a constant 1024 × 1024 matrix squared (2·1024³ FLOPs), both reduced to one scale,
and a trainable weight squared on every forward pass (W·W, 2·256³ FLOPs):

    y = ((x · (W·W)) · mean(chain) · sum(C·C)) · V,    x [n, 256], W [256, 256], V [256, 2]

Its upload's counts (service/onnx_upload.check_onnx: folded constants, folding FLOPs, the fixed
per-pass nodes) fill model.stored as service/uploads.resolve_uploads does, and the job's estimate
(planner/estimate.py) must be within 2× of:

    memory  the peak resident growth of the job run on the CPU in a fresh interpreter, measured as
            tests/engine/test_estimate_peaks.py measures it (the folded constants dominate);
    work    FLOPs counted by torch.utils.flop_counter.FlopCounterMode (matmuls and convolutions) around
            the conversion (the folding: the estimate's `constants` work term) and around the worker's
            training loop (ntklab.engine.training.loop.train: the `training` term, in which W·W runs once per
            pass, not once per example).

Before the upload counted these, the estimate held none of the 256 MiB and none of the folding, and
counted W·W nowhere: 1.6 MB against 0.3 GB measured, 0 FLOPs against 2.1·10⁹ for the conversion.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch.utils.flop_counter import FlopCounterMode

from ntklab.api_schemas.spec import JobSpec
from ntklab.config.settings import Settings
from ntklab.engine.callbacks import NullCallbacks
from ntklab.engine.nets.network import build_network
from ntklab.engine.training.data import load_data
from ntklab.engine.training.loop import train
from ntklab.engine.uploads import Uploads
from ntklab.planner.estimate import estimate_job
from ntklab.service.onnx_upload import check_onnx

REPO = Path(__file__).resolve().parents[2]
MODEL_ID = "mdl_" + "0" * 32
D, O, N, SIDE, BASE, DOUBLINGS, STEPS = 256, 2, 64, 1024, 1024, 14, 2


def hostile_model() -> bytes:
    """The docstring's graph: nodes 0–14 the chain, 15–19 the folded scale, 20 W·W per pass, 21–23 the data path."""
    nodes = [helper.make_node("Constant", [], ["c0"], value=numpy_helper.from_array(np.ones(BASE, np.float32)))]
    nodes += [helper.make_node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0) for i in range(DOUBLINGS)]
    nodes += [
        helper.make_node("ReduceMean", [f"c{DOUBLINGS}"], ["mean"], keepdims=0),
        helper.make_node(
            "ConstantOfShape", ["side"], ["C"], value=numpy_helper.from_array(np.array([1 / SIDE], np.float32))
        ),
        helper.make_node("MatMul", ["C", "C"], ["C2"]),
        helper.make_node("ReduceSum", ["C2"], ["sum"], keepdims=0),
        helper.make_node("Mul", ["mean", "sum"], ["scale"]),
        helper.make_node("MatMul", ["W", "W"], ["WW"]),
        helper.make_node("MatMul", ["x", "WW"], ["h"]),
        helper.make_node("Mul", ["h", "scale"], ["k"]),
        helper.make_node("MatMul", ["k", "V"], ["y"]),
    ]
    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(np.array([SIDE, SIDE], np.int64), "side"),
        numpy_helper.from_array((rng.normal(size=(D, D)) / np.sqrt(D)).astype(np.float32), "W"),
        numpy_helper.from_array((rng.normal(size=(D, O)) / np.sqrt(D)).astype(np.float32), "V"),
    ]
    graph = helper.make_graph(
        nodes,
        "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", O])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[dict, bytes]:
    """(the job's spec document with model.stored filled in from the upload check, the ONNX bytes)."""
    body = hostile_model()
    path = tmp_path_factory.mktemp("onnx") / "hostile.onnx"
    path.write_bytes(body)
    checked = check_onnx(path, Settings())
    stored = {
        "parameters": checked.parameters,
        "input_shape": [D],
        "output_dim": O,
        "input_integer": False,
        **{
            name: getattr(checked, name)
            for name in (
                "activation_elements",
                "forward_flops",
                "constant_bytes",
                "constant_elements",
                "folding_flops",
                "fixed_elements",
                "fixed_flops",
            )
        },
    }
    spec = {
        "dtype": "float64",
        "model": {"kind": "onnx", "id": MODEL_ID, "output_dim": O, "stored": stored},
        "data": {"kind": "gaussian_mixture", "n_train": N, "input_dim": D, "classes": O},
        "training": {"max_steps": STEPS, "lr": 0.1},
        "diagnostics": {
            "kernel": None,
            "hessian": None,
            "linearization_error": False,
            "layer_sensitivity": False,
            "save_kernels": [],
            "save_weights": False,
        },
    }
    return spec, body


def test_the_upload_counts_the_folded_constants_and_the_weights_square(job):
    stored = job[0]["model"]["stored"]
    chain = BASE * (2 ** (DOUBLINGS + 1) - 1)  # c0 … c14
    assert stored["constant_elements"] == chain + 1 + SIDE**2 + SIDE**2 + 1 + 1
    assert stored["constant_bytes"] == 8 * stored["constant_elements"], (
        "every folded output a float, counted at 8 bytes"
    )
    assert stored["folding_flops"] >= 2 * SIDE**3
    assert (stored["fixed_elements"], stored["fixed_flops"]) == (D * D, 2 * D**3)


PROGRAM = """
import json, sys
import torch
from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.run import run
from ntklab.engine.uploads import Uploads

def status(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key)) * 1024

spec = JobSpec.model_validate(json.loads(sys.argv[1]))
body = open(sys.argv[2], "rb").read()
torch.ones(8) @ torch.ones(8)
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")
before = status("VmRSS:")
run(spec, device="cpu", uploads=Uploads(models={spec.model.id: body}))
print(json.dumps({"growth": status("VmHWM:") - before}))
"""


def test_the_estimated_memory_is_within_twice_the_measured_peak(job, tmp_path):
    spec, body = job
    estimate = estimate_job(JobSpec.model_validate(spec))
    assert estimate.memory_dominant.name == "constants"
    path = tmp_path / "hostile.onnx"
    path.write_bytes(body)
    answer = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(spec), str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert answer.returncode == 0, answer.stderr[-3000:]
    growth = json.loads(answer.stdout.strip().splitlines()[-1])["growth"]
    assert growth > 150 * 2**20, f"the run grew by only {growth} bytes; too small to compare"
    ratio = estimate.memory_bytes / growth
    print(f"memory: estimated {estimate.memory_bytes}, measured {growth} (×{ratio:.2f})")
    assert 0.5 <= ratio <= 2, f"estimated {estimate.memory_bytes} bytes, measured {growth} (×{ratio:.2f})"


def test_the_estimated_work_of_folding_and_of_training_is_within_twice_the_counted_flops(job):
    spec = JobSpec.model_validate(job[0])
    work = {term.name: term.value for term in estimate_job(spec).work}
    data = load_data(spec, dtype=torch.float64)
    with FlopCounterMode(display=False) as conversion:
        uploads = Uploads(models={MODEL_ID: job[1]})
        net = build_network(spec.model, data.input_shape, seed=spec.seed, dtype=torch.float64, uploads=uploads)
    with FlopCounterMode(display=False) as training:
        train(net, data, spec.training, lr=0.1, seed=spec.seed, callbacks=NullCallbacks(), observe=lambda *_: None)
    folding, steps = conversion.get_total_flops(), training.get_total_flops()
    print(
        f"work: folding estimated {work['constants']:.4g}, counted {folding:.4g}; "
        f"training estimated {work['training']:.4g}, counted {steps:.4g}"
    )
    assert folding >= 2 * SIDE**3, "the constant square is computed at conversion"
    assert 0.5 <= work["constants"] / folding <= 2, (work["constants"], folding)
    assert 0.5 <= work["training"] / steps <= 2, (work["training"], steps)
    with FlopCounterMode(display=False) as forward:
        net(data.x_train)
    assert forward.get_total_flops() < 2 * D**3 + 2 * N * D * D + 2 * N * D * O + 1, (
        "W·W once per pass, nothing folded again"
    )

"""Benchmark: the estimate's seconds (planner/estimate.py) against the engine's, and their calibration.

    .venv/bin/python -m bench.bench_time_estimate [--quick] [--repeats N] [--threads N] [--only NAME ...] [--no-calibrate]

seconds = FLOPs / R + D × t_op, with D the framework operations the job dispatches. Calibration:
R from a wide shallow mlp (FLOPs dominate), t_op from a deep narrow one (dispatches dominate), the
two equations solved together; the table prints them as the settings estimate_flops_per_s and
estimate_seconds_per_op. Then every spec of ODD_SPECS (deep, wide, a many-node ONNX graph,
Hessian-heavy, infinite width, …) is estimated at those rates (at the defaults with
--no-calibrate) and run end to end by ntklab.engine.run.run on the CPU, each in a fresh
interpreter that first runs a small job (a worker's first job pays torch's lazy start-up; a
long-lived worker does not). Measured = the median wall time of `repeats` runs of run(), one torch
thread (workers/main.py gives each worker its cores: calibrate with --threads at that count).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from bench.tables import print_head, print_row
from ntklab.api_schemas.spec import JobSpec
from ntklab.planner.estimate import TimeRates, estimate_job

REPO = Path(__file__).resolve().parents[1]
QUIET = {"hessian": None, "layer_sensitivity": False, "save_kernels": [], "save_weights": False}
OFF = QUIET | {"kernel": None, "linearization_error": False, "weight_change": False}
MIXTURE = {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 8}


def deep_graph(residuals: int, inner: int, width: int = 4) -> list[dict]:
    """residuals × (inner dense layers, each followed by a tanh layer), every group inside a residual."""
    body = [
        layer
        for _ in range(inner)
        for layer in ({"type": "dense", "width": width}, {"type": "activation", "name": "tanh"})
    ]
    return [{"type": "residual", "layers": body} for _ in range(residuals)]


CALIBRATION = {
    "wide": {  # 4 steps of 4096 points through a 4096-wide layer, one probe point: ≈ 2·10¹¹ FLOPs, 10⁴ operations
        "data": {"kind": "gaussian_mixture", "n_train": 4096, "input_dim": 512, "probe": {"n": 1}},
        "model": {"hidden": [4096]},
        "training": {"max_steps": 4, "lr": 0.1},
        "diagnostics": OFF,
    },
    "deep": {  # 200 steps through 64 layers of width 4: 10⁵ operations, no FLOPs to speak of
        "data": MIXTURE,
        "model": {"hidden": [4] * 64},
        "training": {"max_steps": 200, "lr": 0.01},
        "diagnostics": OFF,
    },
}

ODD_SPECS = {
    "deep graph 2048 layers": {
        "data": MIXTURE | {"n_train": 16},
        "model": {"kind": "graph", "layers": deep_graph(32, 32)},
        "training": {"max_steps": 5, "lr": 0.01},
        "diagnostics": QUIET | {"kernel": None},
    },
    "deep graph 512 layers": {
        "data": MIXTURE | {"n_train": 16},
        "model": {"kind": "graph", "layers": deep_graph(8, 32)},
        "training": {"max_steps": 20, "lr": 0.01},
        "diagnostics": QUIET,
    },
    "deep mlp 64 × 4, defaults": {
        "data": MIXTURE,
        "model": {"hidden": [4] * 64},
        "training": {"max_steps": 50, "lr": 0.01},
        "diagnostics": {"save_kernels": [], "save_weights": False},
    },
    "wide mlp 16384": {
        "data": {"kind": "gaussian_mixture", "n_train": 1024, "input_dim": 1024},
        "model": {"hidden": [16384]},
        "training": {"max_steps": 3, "lr": 0.1},
        "diagnostics": QUIET,
    },
    "wide mlp 8192, 512 points": {
        "data": {"kind": "gaussian_mixture", "n_train": 512, "input_dim": 512},
        "model": {"hidden": [8192]},
        "training": {"max_steps": 3, "lr": 0.1},
        "diagnostics": QUIET,
    },
    "many-node onnx (3000 nodes)": {
        "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 8},
        "model": {"kind": "onnx", "id": "mdl_" + "0" * 32, "output_dim": 2},
        "training": {"max_steps": 20, "lr": 0.01},
        "diagnostics": QUIET | {"kernel": None},
    },
    "hessian-heavy (16 points × 4 outputs × 64 its)": {
        "data": {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 16, "classes": 4},
        "model": {"hidden": [256, 256]},
        "training": {"max_steps": 2, "lr": 0.1},
        "diagnostics": {
            "hessian": {"at": ["init", "final"], "probe_points": 16, "iterations": 64, "tolerance": 0},
            "layer_sensitivity": False,
            "save_kernels": [],
            "save_weights": False,
        },
    },
    "hessian_spectrum with block norms": {
        "data": {"kind": "gaussian_mixture", "n_train": 128, "input_dim": 16},
        "model": {"hidden": [64, 64]},
        "training": {"max_steps": 2, "lr": 0.1},
        "diagnostics": QUIET
        | {"hessian_spectrum": {"probes": 8, "lanczos_steps": 32, "block_norms": True, "tolerance": 0}},
    },
    "infinite width, 3 layers": {
        "data": {"kind": "gaussian_mixture", "n_train": 128, "input_dim": 8, "probe": {"n": 128}},
        "model": {"hidden": [256, 256, 256]},
        "training": {"max_steps": 10, "lr": 0.1},
        "diagnostics": QUIET | {"infinite_width": {}},
    },
    "cnn on digits": {
        "data": {"kind": "builtin", "name": "digits", "n_train": 512},
        "model": {"kind": "cnn", "hidden": [32, 32], "kernel_size": 3, "padding": 1},
        "training": {"max_steps": 20, "lr": 0.1},
        "diagnostics": QUIET,
    },
    "loss_hessian split": {
        "data": {"kind": "gaussian_mixture", "n_train": 256, "input_dim": 16},
        "model": {"hidden": [128]},
        "training": {"max_steps": 20, "lr": 0.1},
        "diagnostics": QUIET | {"loss_hessian": {"iterations": 32, "tolerance": 0}},
    },
    "long training (20 000 steps, tiny)": {
        "data": {"kind": "gaussian_mixture", "n_train": 32, "input_dim": 4},
        "model": {"hidden": [16]},
        "training": {"max_steps": 20_000, "lr": 0.01},
        "diagnostics": QUIET,
    },
    "big probe set (512, along the path)": {
        "data": {"kind": "gaussian_mixture", "n_train": 512, "input_dim": 16, "probe": {"n": 512}},
        "model": {"hidden": [256]},
        "training": {"max_steps": 100, "lr": 0.1},
        "diagnostics": QUIET | {"kernel": {"points": 8}},
    },
    "adam minibatch, softmax head": {
        "data": {"kind": "gaussian_mixture", "n_train": 2048, "input_dim": 32, "classes": 4},
        "model": {"hidden": [512, 512], "output_activation": "softmax"},
        "training": {"optimizer": "adam", "batch_size": 64, "max_steps": 300, "lr": 0.001, "loss": "cross_entropy"},
        "diagnostics": QUIET,
    },
    "paper width: 10⁶ units on 8 features, 15 steps": {  # fig1-width's widest point: element traffic, not FLOPs
        "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 8},
        "model": {"hidden": [1_000_000], "bias": False},
        "training": {"max_steps": 15, "lr": 0.01, "target_loss": None},
        "diagnostics": OFF,
    },
    "wide on few features: 10⁵ units on 8 features, 100 steps": {
        "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 8},
        "model": {"hidden": [100_000], "bias": False},
        "training": {"max_steps": 100, "lr": 0.01, "target_loss": None},
        "diagnostics": OFF,
    },
    "vit-small example": json.loads((REPO / "examples" / "graphs" / "vit-small.json").read_text()),
    "default spec": {},
}

ONNX_NODES = 3000


def many_node_onnx(nodes: int = ONNX_NODES, d: int = 8, out: int = 2) -> bytes:
    """x [batch, d] → (MatMul by an 8×8 weight, Add a bias, Tanh) × nodes/3 → MatMul → y [batch, out]."""
    rng = np.random.default_rng(0)
    inits, graph_nodes, current = [], [], "x"
    for i in range(nodes // 3):
        inits += [
            numpy_helper.from_array((rng.normal(size=(d, d)) / np.sqrt(d)).astype(np.float32), f"w{i}"),
            numpy_helper.from_array(np.zeros(d, np.float32), f"b{i}"),
        ]
        graph_nodes += [
            helper.make_node("MatMul", [current, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Tanh", [f"a{i}"], [f"h{i}"]),
        ]
        current = f"h{i}"
    inits.append(numpy_helper.from_array(rng.normal(size=(d, out)).astype(np.float32), "w_out"))
    graph_nodes.append(helper.make_node("MatMul", [current, "w_out"], ["y"]))
    graph = helper.make_graph(
        graph_nodes,
        "deep",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", out])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def with_upload(doc: dict, body: bytes) -> dict:
    """The spec with model.stored filled in as the service would (service/onnx_upload.check_onnx at upload)."""
    from ntklab.config.settings import Settings
    from ntklab.service.onnx_upload import check_onnx

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        path.write_bytes(body)
        checked = check_onnx(path, Settings())
    stored = {
        "parameters": checked.parameters,
        "input_shape": [doc["data"]["input_dim"]],
        "output_dim": doc["model"]["output_dim"],
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
                "nodes",
            )
        },
    }
    return doc | {"model": doc["model"] | {"stored": stored}}


PROGRAM = """
import json, sys, time
import torch
torch.set_num_threads(int(sys.argv[3]))
from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.run import run
from ntklab.engine.uploads import Uploads

run(JobSpec.model_validate({"data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4},
                            "model": {"hidden": [8]}, "training": {"max_steps": 5, "lr": 0.1},
                            "diagnostics": {"save_kernels": [], "hessian": {"iterations": 4}}}), device="cpu")
spec = JobSpec.model_validate(json.loads(sys.argv[1]))
models = {spec.model.id: open(sys.argv[2], "rb").read()} if spec.model.kind == "onnx" else {}
seconds = []
for _ in range(int(sys.argv[4])):
    started = time.perf_counter()
    run(spec, device="cpu", uploads=Uploads(models=models))
    seconds.append(time.perf_counter() - started)
print(json.dumps(seconds))
"""


def prepared(doc: dict) -> tuple[dict, bytes]:
    """(the spec document, ready to validate; the ONNX bytes its model names, else b"")."""
    if doc.get("model", {}).get("kind") != "onnx":
        return doc, b""
    body = many_node_onnx()
    return with_upload(doc, body), body


def measured_seconds(
    doc: dict, body: bytes = b"", *, repeats: int = 1, threads: int = 1, timeout: float = 600
) -> float:
    """The median wall time of `repeats` runs of run(spec) on the CPU in a fresh interpreter (module docstring)."""
    with tempfile.NamedTemporaryFile(suffix=".onnx") as model:
        model.write(body)
        model.flush()
        answer = subprocess.run(
            [sys.executable, "-c", PROGRAM, json.dumps(doc), model.name, str(threads), str(repeats)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    if answer.returncode != 0:
        raise RuntimeError(answer.stderr[-3000:])
    return statistics.median(json.loads(answer.stdout.strip().splitlines()[-1]))


def calibrate(repeats: int, threads: int) -> TimeRates:
    """R and t_op solving seconds = FLOPs / R + D·t_op on the wide and the deep calibration specs."""
    rows = []
    for name, doc in CALIBRATION.items():
        estimate = estimate_job(JobSpec.model_validate(doc))
        rows.append(
            (name, estimate.flops, estimate.dispatches, measured_seconds(doc, repeats=repeats, threads=threads))
        )
    (_, f1, d1, s1), (_, f2, d2, s2) = rows
    inverse_rate, per_op = np.linalg.solve([[f1, d1], [f2, d2]], [s1, s2])
    rates = TimeRates(flops_per_s=float(1 / inverse_rate), seconds_per_op=float(per_op))
    print_head(
        f"Time estimate: calibration ({threads} thread{'s' * (threads > 1)}, median of {repeats})",
        ["spec", "FLOPs", "operations", "measured s"],
    )
    for name, flops, ops, seconds in rows:
        print_row(name, f"{flops:.3g}", f"{ops:.3g}", f"{seconds:.3f}")
    print(f"\nestimate_flops_per_s = {rates.flops_per_s:.3g}, estimate_seconds_per_op = {rates.seconds_per_op:.3g}")
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run of each")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=None, help="odd specs whose names contain one of these")
    parser.add_argument("--no-calibrate", action="store_true", help="estimate at the default rates")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    rates = TimeRates() if args.no_calibrate else calibrate(args.repeats, args.threads)
    print_head(
        "Time estimate: odd specs, estimated vs measured seconds",
        ["spec", "FLOPs", "operations", "estimated s", "measured s", "measured / estimated"],
    )
    for name, doc in ODD_SPECS.items():
        if args.only is not None and not any(part in name for part in args.only):
            continue
        doc, body = prepared(doc)
        estimate = estimate_job(JobSpec.model_validate(doc), rates)
        seconds = measured_seconds(doc, body, repeats=args.repeats, threads=args.threads)
        print_row(
            name,
            f"{estimate.flops:.3g}",
            f"{estimate.dispatches:.3g}",
            f"{estimate.seconds:.3g}",
            f"{seconds:.3g}",
            f"{seconds / estimate.seconds:.2f}",
        )


if __name__ == "__main__":
    main()

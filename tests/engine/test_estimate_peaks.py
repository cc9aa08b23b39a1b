"""The estimate (planner/estimate.py, arithmetic on the spec) against the engine it predicts.

Peaks: each spec runs in a fresh interpreter that imports torch and the engine, resets its
peak resident size (/proc/self/clear_refs), runs the job on the CPU and reports how far the
peak rose over its size before the run. Each spec is built so that one term dominates (the
data, a wide layer's activations, the tangent kernels, the Lanczos basis, convolution maps, a
layer graph's activations) and is a few hundred MB, so the job's own memory dwarfs torch's
thread pools. The estimate must be within 2× of the measured growth. The large tensors are
above glibc's largest mmap threshold (32 MiB), so a freed one goes back to the system: tensors
of 1–32 MiB are carved from the heap once the threshold has grown, and the heap keeps what a
phase freed, so the resident peak of such a job drifts from the largest phase towards their sum
(a 4096 × 1536 graph measured 0.42× its estimate for that reason).

Profiles: the layer plan's one-example profile (planner/forward_profile.py) must list the
same covered layers, parameters and fallback parameters as the profile the worker measures
with torch on the built network (engine/kernels/kernel_cost.py), so the estimate costs the
kernel method the worker will run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.kernels import kernel_cost
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network
from ntklab.engine.training.data import load_data
from ntklab.planner.estimate import estimate_job
from ntklab.planner.forward_profile import forward_profile

REPO = Path(__file__).resolve().parents[2]
QUIET = {"hessian": None, "layer_sensitivity": False, "save_kernels": [], "save_weights": False}

PEAK_SPECS = {
    "data": {  # 10 000 × 1 500 float64 values, made twice over: ≈ 0.24 GB
        "data": {"kind": "gaussian_mixture", "n_train": 10_000, "input_dim": 1500},
        "model": {"hidden": [16]},
        "training": {"max_steps": 2, "lr": 0.1},
        "diagnostics": QUIET,
    },
    "activations": {  # a full-batch step of 6144 points through a 6144-wide tanh layer: ≈ 0.45 GB
        "data": {"kind": "gaussian_mixture", "n_train": 6144, "input_dim": 16},
        "model": {"hidden": [6144], "activation": "tanh"},
        "training": {"max_steps": 2, "lr": 0.1},
        "diagnostics": QUIET | {"kernel": None, "linearization_error": False},
    },
    "kernel": {  # tangent kernels at w₀ of 512 points × 4 outputs (2048²), outputs and logits of a softmax head: ≈ 0.25 GB
        "data": {"kind": "gaussian_mixture", "n_train": 512, "input_dim": 8, "classes": 4, "probe": {"n": 512}},
        "model": {"hidden": [32], "output_activation": "softmax"},
        "training": {"max_steps": 1, "lr": 0.1},
        "diagnostics": {"kernel": None, "hessian": None, "layer_sensitivity": False, "save_kernels": ["init"]},
    },
    "lanczos": {  # 16 float64 Lanczos vectors of 2.92 M weights, one output: ≈ 0.45 GB
        "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 16, "targets": "signed"},
        "model": {"hidden": [1700, 1700]},
        "training": {"max_steps": 1, "lr": 0.01},
        "diagnostics": {
            "hessian": {"at": ["init"], "probe_points": 1, "iterations": 16},
            "layer_sensitivity": False,
            "save_kernels": [],
            "save_weights": False,
        },
    },
    "convolution": {  # 1500 images 3×16×16 through two 32-channel convolutions: ≈ 0.3 GB
        "data": {"kind": "gaussian_mixture", "n_train": 1500, "input_dim": 768},
        "model": {"kind": "cnn", "hidden": [32, 32], "input_shape": [3, 16, 16]},
        "training": {"max_steps": 2, "lr": 0.1},
        "diagnostics": QUIET,
    },
    "graph": {  # dense 2048, layer norm, gelu, dense 2048 over 4096 points: ≈ 0.3 GB
        "data": {"kind": "gaussian_mixture", "n_train": 4096, "input_dim": 16},
        "model": {
            "kind": "graph",
            "layers": [
                {"type": "dense", "width": 2048},
                {"type": "layer_norm"},
                {"type": "activation", "name": "gelu"},
                {"type": "dense", "width": 2048},
            ],
        },
        "training": {"max_steps": 2, "lr": 0.1},
        "diagnostics": QUIET | {"kernel": None},
    },
}

PROGRAM = """
import json, sys, time
import torch
from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.run import run

def status(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key)) * 1024

spec = JobSpec.model_validate(json.loads(sys.argv[1]))
torch.ones(8) @ torch.ones(8)
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")
before, started = status("VmRSS:"), time.process_time()
run(spec, device="cpu")
print(json.dumps({"growth": status("VmHWM:") - before, "cpu_s": time.process_time() - started}))
"""


def measured_growth(spec: dict) -> int:
    """Peak resident bytes the run added, in a fresh interpreter."""
    answer = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert answer.returncode == 0, answer.stderr[-3000:]
    return json.loads(answer.stdout.strip().splitlines()[-1])["growth"]


@pytest.mark.slow  # a fresh process per case measuring its peak RSS: 25–80 s each on a loaded 2-core machine
@pytest.mark.parametrize("name", sorted(PEAK_SPECS))
def test_the_estimate_is_within_twice_the_measured_peak(name):
    spec = JobSpec.model_validate(PEAK_SPECS[name])
    estimate = estimate_job(spec)
    assert estimate.memory_dominant.name == name.replace("convolution", "activations").replace("graph", "activations")
    growth = measured_growth(PEAK_SPECS[name])
    assert growth > 150 * 2**20, f"{name}: the run grew by only {growth} bytes; too small to compare"
    ratio = estimate.memory_bytes / growth
    assert 0.5 <= ratio <= 2, f"{name}: estimated {estimate.memory_bytes} bytes, measured {growth} (×{ratio:.2f})"


def example(name: str) -> dict:
    return json.loads((REPO / "examples" / "graphs" / f"{name}.json").read_text())


PROFILE_SPECS = {
    "mlp": {
        "model": {"hidden": [12, 7], "train_output_layer": False},
        "data": {"kind": "gaussian_mixture", "n_train": 8},
    },
    "cnn": {
        "model": {"kind": "cnn", "hidden": [4, 6], "stride": 2, "readout": "flatten"},
        "data": {"kind": "builtin", "name": "digits", "n_train": 8},
    },
    "resnet": {
        "model": {"kind": "resnet", "block": "conv", "hidden": [5], "blocks": 2},
        "data": {"kind": "builtin", "name": "digits", "n_train": 8},
    },
    **{name: example(name) for name in ("pre-ln-transformer", "resnet-layernorm", "vgg-like", "vit-small")},
}


@pytest.mark.parametrize("name", sorted(PROFILE_SPECS))
def test_the_planned_profile_lists_the_layers_the_worker_measures(name):
    spec = JobSpec.model_validate(PROFILE_SPECS[name])
    data = load_data(spec)
    net = build_network(spec.model, data.input_shape, seed=0)
    measured = kernel_cost.profile(net, data.x_probe, lambda logits: apply_head(net.head, logits))
    planned = forward_profile(spec).kernel_profile(itemsize=4)
    assert (planned.O, planned.p, planned.p_fallback) == (measured.O, measured.p, measured.p_fallback)
    assert sorted(planned.layers, key=repr) == sorted(measured.layers, key=repr)
    assert 0.5 <= planned.forward_flops / measured.forward_flops <= 2

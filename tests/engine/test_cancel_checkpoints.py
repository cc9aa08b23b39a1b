"""Every long computation of a job reaches checkpoints between its units of work, and one that raises stops it there.

A Countdown is a checkpoint (engine/callbacks.py) that raises JobCancelled at its `at`-th call;
at=∞ counts the calls of a whole computation. tests/integration/test_cancel_phases.py times the same
checkpoints through a live worker.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from ntklab.api_schemas.spec import HessianSpectrumDiagnostics, JobSpec, model_spec
from ntklab.engine.callbacks import JobCancelled, NullCallbacks, Progress
from ntklab.engine.curvature.hessian import model_hessian
from ntklab.engine.curvature.hessian_spectrum import hessian_spectrum
from ntklab.engine.curvature.loss_hessian import loss_hessian_split
from ntklab.engine.kernels import ntk
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.kernels.per_sample import per_sample_kernel
from ntklab.engine.limits.infinite_width import limit_kernels
from ntklab.engine.meter import Meter
from ntklab.engine.nets.network import build_network
from ntklab.engine.nets.onnx_model import build_onnx_network
from ntklab.engine.run import run

MODEL_ID = "mdl_" + "0" * 32


class Countdown:
    def __init__(self, at: float = math.inf) -> None:
        self.at, self.calls = at, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls >= self.at:
            raise JobCancelled(f"checkpoint {self.calls}")


def stops_midway(compute) -> int:
    """compute(checkpoint) reaches a checkpoint, and raising at the first stops it there; the number reached."""
    counted = Countdown()
    compute(counted)
    assert counted.calls >= 1
    first = Countdown(at=1)
    with pytest.raises(JobCancelled):
        compute(first)
    assert first.calls == 1
    return counted.calls


NETWORKS = {
    "mlp": (model_spec(hidden=[16, 16], output_dim=3), (5,)),
    "cnn": (model_spec(kind="cnn", hidden=[3, 4], output_dim=2, readout="flatten"), (1, 8, 8)),
}


@pytest.mark.parametrize("method", ["structured", "jacobian", "ntk_vp"])
@pytest.mark.parametrize("network", list(NETWORKS))
def test_every_kernel_method_reaches_checkpoints(network, method, monkeypatch):
    spec, shape = NETWORKS[network]
    net = build_network(spec, shape, seed=0, dtype=torch.float64)
    x = torch.randn(6, *shape, dtype=torch.float64)
    monkeypatch.setattr(
        ntk, "CHECKPOINT_FLOPS", 1.0
    )  # ntk_vp: one column per block, as on a network of seconds a column
    reached = stops_midway(lambda checkpoint: tangent_kernel(net, x, method=method, checkpoint=checkpoint))
    if method == "ntk_vp":
        assert reached == 6 * spec.output_dim


def test_ntk_vp_blocks_hold_about_checkpoint_flops():
    net = build_network(model_spec(hidden=[256, 256], output_dim=10), (32,), seed=0, dtype=torch.float64)
    x = torch.randn(60, 32, dtype=torch.float64)
    params = {name: p.detach() for name, p in net.named_parameters()}
    matmul_flops = 2 * (32 * 256 + 256 * 256 + 256 * 10)  # F, the forward's matmuls (torch counts a little more)
    block = ntk._ntk_vp_block(net, params, 600, x)
    assert ntk.CHECKPOINT_FLOPS / (5 * 60 * matmul_flops) / 2 <= block <= ntk.CHECKPOINT_FLOPS / (5 * 60 * matmul_flops)


def test_the_per_sample_fallback_reaches_a_checkpoint_per_chunk():
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).double()  # no rule covers plain nn.Linear
    x = torch.randn(6, 4, dtype=torch.float64)
    names = [name for name, _ in net.named_parameters()]
    stops_midway(lambda checkpoint: tangent_kernel(net, x, method="structured", checkpoint=checkpoint))
    # a budget of one byte: panels and chunks of one point, n·(n+1)/2 = 21 chunks
    assert (
        stops_midway(lambda checkpoint: per_sample_kernel(net, x, lambda f: f, names, budget=1, checkpoint=checkpoint))
        == 21
    )


def test_the_limit_kernel_reaches_a_checkpoint_per_map():
    x = torch.randn(5, 3, dtype=torch.float64)
    model = model_spec(hidden=[8, 8, 8], output_dim=1)
    assert (
        stops_midway(lambda checkpoint: limit_kernels(model, x, checkpoint=checkpoint)) == 3 * 2 + 1
    )  # weights, σ; readout


def test_the_loss_hessian_split_reaches_a_checkpoint_per_product():
    net = build_network(model_spec(hidden=[8], output_dim=2), (3,), seed=0, dtype=torch.float64)
    x, y = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)
    stops_midway(lambda checkpoint: loss_hessian_split(net, x, y, "mse", iterations=6, checkpoint=checkpoint))


def test_an_onnx_conversion_reaches_a_checkpoint_per_node():
    nodes = [
        helper.make_node("Constant", [], ["c0"], value=numpy_helper.from_array(np.eye(3), "eye")),
        helper.make_node("MatMul", ["c0", "c0"], ["c1"]),
        helper.make_node("MatMul", ["x", "c1"], ["h"]),
        helper.make_node("Gemm", ["h", "w", "b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "folds",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, ["batch", 2])],
        [numpy_helper.from_array(np.ones((2, 3)), "w"), numpy_helper.from_array(np.zeros(2), "b")],
    )
    onnx_bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    model = model_spec(kind="onnx", id=MODEL_ID, output_dim=2)
    assert (
        stops_midway(
            lambda checkpoint: build_onnx_network(model, onnx_bytes, dtype=torch.float64, checkpoint=checkpoint)
        )
        == 4
    )


class CancelAfter(NullCallbacks):
    """Callbacks whose cancelled() turns True at its `at`-th call; the phases reported, in order."""

    def __init__(self, at: float = math.inf) -> None:
        self.at, self.asked, self.phases = at, 0, []

    def progress(self, progress: Progress) -> None:
        self.phases.append(progress.phase)

    def cancelled(self) -> bool:
        self.asked += 1
        return self.asked >= self.at


def test_hessian_products_and_spectra_are_checkpoints_through_the_meters_report():
    net = build_network(model_spec(hidden=[8], output_dim=2), (3,), seed=0, dtype=torch.float64)
    x, y = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    spectrum = HessianSpectrumDiagnostics(of="loss", probes=3, lanczos_steps=4, grid=10, bins=4)
    computations = {
        "hessian": lambda progress: model_hessian(net, x[:2], iterations=6, tolerance=0, progress=progress),
        "hessian_spectrum": lambda progress: hessian_spectrum(
            net, spectrum, x_probe=x, x_train=x, y_train=y, loss="mse", progress=progress
        ),
    }
    for phase, compute in computations.items():
        meter = Meter(CancelAfter(at=2), total=1)
        with pytest.raises(JobCancelled, match=f"cancelled during {phase}"), meter.counted(phase) as progress:
            compute(progress)
        assert meter.callbacks.asked == 2


@pytest.mark.parametrize("phase", ["kernel", "hessian", "infinite_width"])
def test_a_run_cancelled_inside_a_phase_stops_in_it(phase):
    spec = JobSpec.model_validate(
        {
            "seed": 0,
            "model": {"hidden": [8, 8]},
            "data": {"kind": "gaussian_mixture", "n_train": 6, "input_dim": 3, "classes": 2, "probe": {"n": 6}},
            "training": {"max_steps": 2, "lr": 0.1},
            "diagnostics": {
                "kernel": {"method": "ntk_vp"},
                "hessian": {"at": ["final"], "probe_points": 2, "iterations": 6},
                "infinite_width": {},
                "layer_sensitivity": False,
            },
        }
    )
    cancelled = CancelAfterPhase(phase)
    with pytest.raises(JobCancelled, match=f"cancelled during {phase}"):
        run(spec, cancelled)
    assert cancelled.phases[-1] == phase, "no later phase started"


class CancelAfterPhase(CancelAfter):
    """cancelled() turns True once `phase` has been reported."""

    def __init__(self, phase: str) -> None:
        super().__init__()
        self.phase = phase

    def cancelled(self) -> bool:
        return self.phase in self.phases

"""The example graphs of examples/graphs/ (small ViT, VGG-like CNN with max-pooling, pre-LN
transformer block, ResNet with LayerNorm): each runs end to end through run() and its Hessian by
Lanczos is the dense Hessian's (double-backward autograd), both on a tiny instance of the same graph.

The tiny instance is the example with smaller widths, set by the dotted paths a sweep would use.
"""

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.artifacts import load_weights
from ntklab.engine.curvature.hessian import model_hessian
from ntklab.engine.nets.network import build_network, trainable_parameters
from ntklab.engine.run import run
from ntklab.engine.training.data import load_data
from ntklab.planner.architecture import count_parameters
from ntklab.service.grid import set_path
from tests.engine.dense_reference import dense_hessian

REPO = Path(__file__).resolve().parents[2]
TINY_WIDTHS = {
    "vit-small": {
        "model.layers.0.patch": 4,
        "model.layers.0.width": 4,
        "model.layers.1.layers.1.width": 4,
        "model.layers.2.layers.1.width": 6,
        "model.layers.2.layers.3.width": 4,
    },
    "vgg-like": {
        "model.layers.0.width": 2,
        "model.layers.2.width": 2,
        "model.layers.5.width": 3,
        "model.layers.7.width": 3,
        "model.layers.11.width": 6,
    },
    "pre-ln-transformer": {
        "model.layers.0.width": 4,
        "model.layers.1.layers.1.width": 4,
        "model.layers.2.layers.1.width": 6,
        "model.layers.2.layers.3.width": 4,
    },
    "resnet-layernorm": {
        "model.layers.0.width": 2,
        "model.layers.2.layers.1.width": 2,
        "model.layers.2.layers.3.width": 2,
        "model.layers.3.layers.1.width": 3,
        "model.layers.3.layers.3.width": 3,
    },
}
QUICK = {
    "dtype": "float64",
    "training.max_steps": 5,
    "training.target_loss": None,
    "data.n_train": 16,
    "data.probe": {"n": 4},
    "diagnostics.kernel.points": 3,
    "diagnostics.hessian": {"at": ["init", "final"], "top_k": 2, "probe_points": 1, "iterations": 8},
}


def tiny(name: str, **changes) -> JobSpec:
    spec = json.loads((REPO / "examples" / "graphs" / f"{name}.json").read_text())
    for path, value in {**TINY_WIDTHS[name], **changes}.items():
        set_path(spec, path, value)
    return JobSpec.model_validate(spec)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TINY_WIDTHS))
def test_example_runs_end_to_end(name):
    spec = tiny(name, **QUICK)
    result = run(spec)
    s = result.summary
    data = load_data(spec, dtype=torch.float64)
    assert s["outcome"] == "max_steps" and s["steps"] == 5
    assert s["parameters"] == count_parameters(spec.model, data.input_shape)
    assert result.series["loss"].values[-1] < result.series["loss"].values[0]
    for key in (
        "delta_k_max",
        "hessian_norm_init",
        "hessian_norm_final",
        "grad_norm_init",
        "kernel_lambda_max_init",
        "weight_change_l2",
        "linearization_error_final",
    ):
        assert math.isfinite(s[key]) and s[key] > 0, key
    side = 4 * spec.model.output_dim
    kernel = np.load(io.BytesIO(result.artifacts["kernel_final.npy"].data))
    assert kernel.shape == (side, side)
    sensitivity = json.loads(result.artifacts["layer_sensitivity.json"].data)["init"]
    assert len(sensitivity) == sum(layer.type in ("activation", "residual") for layer in spec.model.layers)
    net = build_network(spec.model, data.input_shape, seed=99, dtype=torch.float64)
    load_weights(net, result.artifacts["weights_final.npz"].data)
    outputs = np.load(io.BytesIO(result.artifacts["outputs_final.npy"].data))
    np.testing.assert_allclose(net.outputs(data.x_probe).detach().numpy(), outputs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(TINY_WIDTHS))
def test_lanczos_matches_the_dense_hessian(name):
    spec = tiny(name, **{"data.targets": "signed"})
    data = load_data(spec, dtype=torch.float64)
    net = build_network(spec.model, data.input_shape, seed=3, dtype=torch.float64)
    p = sum(t.numel() for t in trainable_parameters(net).values())
    assert net.output_dim == 1 and p <= 400
    x = data.x_probe[:1]
    report = model_hessian(net, x, top_k=3, iterations=p + 1)
    dense = dense_hessian(net, x[0])
    torch.testing.assert_close(dense, dense.T, rtol=0, atol=1e-12)
    spectrum = torch.linalg.eigvalsh(dense)
    scale = float(spectrum.abs().max())
    top = sorted(spectrum.abs().tolist(), reverse=True)[:3]
    assert sorted(map(abs, report.eigenvalues[0][0]), reverse=True) == pytest.approx(top, rel=1e-6)
    for ritz in report.eigenvalues[0][0]:
        assert float((spectrum - ritz).abs().min()) <= 1e-8 * scale
    assert report.norm == pytest.approx(scale, rel=1e-8)

"""diagnostics.infinite_width through a whole run, and the specs it refuses (api_schemas/infinite_width.py)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.limits.infinite_width import kernel_inf_distance, limit_kernels
from ntklab.engine.nets.network import build_network
from ntklab.engine.run import run
from ntklab.engine.training.data import load_data


def spec(model: dict, **diagnostics) -> JobSpec:
    return JobSpec.model_validate(
        {
            "model": {"hidden": [256], "activation": "tanh", **model},
            "data": {"kind": "gaussian_mixture", "n_train": 12, "input_dim": 4, "classes": 3, "probe": {"n": 6}},
            "training": {"max_steps": 20, "target_loss": None},
            "diagnostics": {"infinite_width": {}, "hessian": None, "layer_sensitivity": False, **diagnostics},
            "dtype": "float64",
        }
    )


@pytest.mark.parametrize("head,kernel", [("identity", {}), ("softmax", None)])
def test_the_run_reports_the_distance_of_the_logits_kernel_at_init_and_at_the_end(head, kernel):
    """With a softmax head the distance is of the logits' kernel; with the kernel diagnostic off the final
    kernel is computed for it. Checked against the network rebuilt from the same seed and trained weights."""
    job = spec({"output_activation": head}, kernel=kernel)
    result = run(job)
    s = result.summary
    theta = np.load(io.BytesIO(result.artifacts["kernel_inf.npy"].data))
    sigma = np.load(io.BytesIO(result.artifacts["nngp_inf.npy"].data))
    data = load_data(job, dtype=torch.float64, device="cpu")
    limit = limit_kernels(job.model, data.x_probe)
    np.testing.assert_allclose(theta, limit.ntk.numpy(), rtol=1e-12)
    np.testing.assert_allclose(sigma, limit.nngp.numpy(), rtol=1e-12)
    assert theta.shape == (6, 6)
    net = build_network(job.model, data.input_shape, seed=job.seed, dtype=torch.float64)
    k0 = tangent_kernel(net, data.x_probe, method="jacobian", of="logits")
    assert k0.shape == (18, 18)
    assert s["kernel_inf_distance_init"] == pytest.approx(kernel_inf_distance(k0, limit.ntk), rel=1e-10)
    assert 0 < s["kernel_inf_distance_init"] < 0.3
    assert (
        s["kernel_inf_distance_final"] is not None and s["kernel_inf_distance_final"] != s["kernel_inf_distance_init"]
    )
    assert s["lambda_min_inf"] == pytest.approx(np.linalg.eigvalsh(theta)[0], rel=1e-10)
    assert 0 <= s["kernel_inf_quadrature_error"] <= 1e-10


def test_the_distance_is_against_theta_tensor_identity():
    """kernel_inf_distance against the explicit Kronecker product Θ ⊗ I_O."""
    theta = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    K = torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    explicit = torch.linalg.norm(K - torch.kron(theta, torch.eye(3, dtype=torch.float64))) / torch.linalg.norm(
        torch.kron(theta, torch.eye(3, dtype=torch.float64))
    )
    assert kernel_inf_distance(K, theta) == pytest.approx(explicit.item(), rel=1e-13)


def test_off_by_default():
    assert JobSpec().diagnostics.infinite_width is None


REFUSED = {
    "meanfield": ({"parameterization": "meanfield"}, "model.parameterization 'meanfield'"),
    "max_pool": (
        {
            "kind": "graph",
            "input_shape": [1, 2, 2],
            "layers": [{"type": "conv2d", "width": 4}, {"type": "max_pool", "kernel_size": 2}, {"type": "flatten"}],
        },
        "model.layers.1 (max_pool)",
    ),
    "layer_norm": (
        {"kind": "graph", "layers": [{"type": "dense", "width": 4}, {"type": "layer_norm"}]},
        "model.layers.1 (layer_norm)",
    ),
    "activation of an activation": (
        {
            "kind": "graph",
            "layers": [
                {"type": "dense", "width": 4},
                {"type": "activation", "name": "relu"},
                {"type": "activation", "name": "tanh"},
            ],
        },
        "model.layers.2 (activation)",
    ),
    "residual without a weight layer": (
        {
            "kind": "graph",
            "layers": [
                {"type": "dense", "width": 4},
                {"type": "residual", "layers": [{"type": "activation", "name": "relu"}]},
            ],
        },
        "model.layers.1 (residual)",
    ),
    "attention inside a residual": (
        {
            "kind": "graph",
            "input_shape": [2, 2],
            "layers": [
                {"type": "residual", "layers": [{"type": "dense", "width": 2}, {"type": "self_attention", "width": 2}]},
                {"type": "global_avg_pool"},
            ],
        },
        "model.layers.0.layers.1 (self_attention)",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_models_without_a_limit_are_refused_naming_the_layer(name):
    model, named = REFUSED[name]
    with pytest.raises(ValidationError) as refused:
        spec({"hidden": [4], **model})
    (error,) = refused.value.errors()
    assert error["loc"] == ("diagnostics",)
    assert "diagnostics.infinite_width" in error["msg"] and named in error["msg"]


def test_the_same_models_are_accepted_without_the_diagnostic():
    for model, _ in REFUSED.values():
        JobSpec.model_validate(
            {"model": {"hidden": [4], **model}, "data": {"kind": "gaussian_mixture", "input_dim": 4}}
        )

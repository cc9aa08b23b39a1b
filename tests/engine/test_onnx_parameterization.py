"""An uploaded model in ntk or mup parameterization (engine/nets/onnx_parameterization.py), against references
computed here from the original torch module: its outputs, and its tangent kernel by torch.func in float64

    K_ref = Σ_weights m_l² J_l J_lᵀ + Σ_other J_p J_pᵀ,    J_p = ∂f/∂p of the module's own parameters [n·O, |p|],

with m_l written out per layer from the module's own shapes (in_features, in_channels/groups·k², 1 for an embedding)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from onnx import helper, numpy_helper
from torch import nn
from torch.func import functional_call, jacrev

from ntklab.api_schemas.spec import AnyModel, JobSpec, model_spec
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.nets.network import build_network
from ntklab.engine.nets.onnx_model import build_onnx_network
from ntklab.engine.nets.onnx_parameterization import layer_roles
from ntklab.engine.run import run
from ntklab.engine.uploads import Uploads
from tests.engine.test_onnx_model import MODEL_ID, PreLNBlock, Tokens, export
from tests.upload_files import mlp_model


def spec(parameterization: str, out: int = 2) -> AnyModel:
    return model_spec(kind="onnx", id=MODEL_ID, output_dim=out, parameterization=parameterization)


# module → (input shape, {module name of each weight layer: role}); the roles are the architecture's, written out
MODULES = {
    "mlp": (
        lambda: nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 2)),
        (5, 4),
        {"0": "input", "2": "hidden", "4": "readout"},
    ),
    "cnn": (
        lambda: nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=2),
            nn.Softplus(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(4, 2),
        ),
        (5, 1, 6, 6),
        {"0": "input", "2": "hidden", "6": "readout"},
    ),
    "tokens": (Tokens, (5, 7), {"embed": "input", "fc": "readout"}),
}


def module_fan_in(layer: nn.Module) -> int:
    if isinstance(layer, nn.Linear):
        return layer.in_features
    if isinstance(layer, nn.Conv2d):
        return layer.in_channels // layer.groups * layer.kernel_size[0] * layer.kernel_size[1]
    assert isinstance(layer, nn.Embedding)
    return 1


def expected_multiplier(parameterization: str, fan_in: int, role: str) -> float:
    """The table of docs/models.md ("Parameterization of an uploaded model")."""
    if parameterization == "ntk":
        return 1 / math.sqrt(fan_in)
    return {"input": 1.0, "hidden": 1 / math.sqrt(fan_in), "readout": 1 / fan_in}[role]


def reference_kernel(module: nn.Module, x: torch.Tensor, roles: dict[str, str], parameterization: str) -> torch.Tensor:
    """Σ_p s_p² J_p J_pᵀ over the module's parameters, J_p by jacrev of the module itself; s = m for a weight layer's
    weight (those in `roles`), 1 for biases and the rest."""
    params = {name: p.detach() for name, p in module.named_parameters()}
    jacobians = jacrev(lambda p: functional_call(module, p, (x,)).reshape(-1))(params)
    layers = dict(module.named_modules())
    K = torch.zeros(x.shape[0] * 2, x.shape[0] * 2, dtype=torch.float64)
    for name, J in jacobians.items():
        owner, kind = name.rsplit(".", 1)
        layer_weight = kind == "weight" and owner in roles  # not a LayerNorm's γ
        scale = (
            expected_multiplier(parameterization, module_fan_in(layers[owner]), roles[owner]) if layer_weight else 1.0
        )
        J = J.reshape(J.shape[0], -1)
        K += scale**2 * J @ J.T
    return K


def module_and_points(name: str) -> tuple[nn.Module, torch.Tensor, dict[str, str]]:
    make, shape, roles = MODULES[name]
    torch.manual_seed(0)
    module = make().double().eval()
    with torch.no_grad():
        for parameter in module.parameters():  # trained-looking weights: the LayerNorm's γ and β away from 1 and 0
            parameter.add_(0.1 * torch.randn_like(parameter))
    x = torch.randint(0, 10, shape) if name == "tokens" else torch.randn(shape, dtype=torch.float64)
    return module, x, roles


@pytest.mark.parametrize("parameterization", ["ntk", "mup"])
@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_outputs_are_the_exported_ones_and_the_kernel_is_the_rescaled_jacobians(name, parameterization):
    module, x, roles = module_and_points(name)
    onnx_bytes = export(module, x)
    net = build_onnx_network(spec(parameterization), onnx_bytes, dtype=torch.float64)
    torch.testing.assert_close(net(x), module(x), rtol=0, atol=1e-12)
    single = build_onnx_network(spec(parameterization), onnx_bytes, dtype=torch.float32)
    torch.testing.assert_close(single(x if name == "tokens" else x.float()), module(x).float(), rtol=0, atol=1e-6)
    K_ref = reference_kernel(module, x, roles, parameterization)
    for method in ("structured", "jacobian"):
        torch.testing.assert_close(tangent_kernel(net, x, method=method), K_ref, rtol=1e-10, atol=1e-12)
    standard = build_onnx_network(spec("standard"), onnx_bytes, dtype=torch.float64)
    assert not torch.allclose(tangent_kernel(standard, x, method="jacobian"), K_ref, rtol=1e-3), "the rescaling shows"


def test_the_roles_of_a_transformer_block_follow_the_graph():
    """q, k, v read LN(x) of the input (no layer before them); the head precedes no layer; the rest are hidden."""
    torch.manual_seed(0)
    module = PreLNBlock().double().eval()
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    net = build_onnx_network(spec("mup"), export(module, x), dtype=torch.float64)
    source = {
        int(key.split(".")[1]): net.parameter_sources[key][0].split(".")[0]  # "q.bias" (the exporter renames weights)
        for key in net.parameter_sources
        if key.startswith("layers.") and key.endswith(".bias")
    }
    roles = {source[index]: role for index, role in layer_roles(net.steps).items()}
    assert roles == {
        "q": "input",
        "k": "input",
        "v": "input",
        "proj": "hidden",
        "fc1": "hidden",
        "fc2": "hidden",
        "head": "readout",
    }
    torch.testing.assert_close(net(x), module(x), rtol=0, atol=1e-12)


def test_a_gemm_keeps_its_alpha_and_beta_and_a_one_layer_network_is_an_input_layer():
    """Gemm(x, B, C) = α·x·B + β·C, B [4, 3]: ntk makes c = α/√4 and stores 2·B; mup leaves the only layer as exported."""
    B, C = np.arange(12.0).reshape(4, 3) / 10, np.array([1.0, -1.0, 0.5])
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "B", "C"], ["y"], alpha=0.5, beta=2.0)],
        "g",
        [helper.make_tensor_value_info("x", 11, ["n", 4])],
        [helper.make_tensor_value_info("y", 11, ["n", 3])],
        [numpy_helper.from_array(B, "B"), numpy_helper.from_array(C, "C")],
    )
    onnx_bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    x = torch.randn(2, 4, dtype=torch.float64)
    expected = 0.5 * x @ torch.tensor(B) + 2.0 * torch.tensor(C)
    ntk, mup = (build_onnx_network(spec(p, 3), onnx_bytes, dtype=torch.float64) for p in ("ntk", "mup"))
    (layer,) = ntk.layers
    assert (layer.weight_multiplier, layer.bias_multiplier) == (0.25, 2.0)
    torch.testing.assert_close(layer.weight, 2 * torch.tensor(B).T, rtol=0, atol=0)
    assert mup.layers[0].weight_multiplier == 0.5
    for net in (ntk, mup):
        torch.testing.assert_close(net(x), expected, rtol=0, atol=1e-14)


def test_an_onnx_mlp_of_the_built_in_ntk_weights_uploaded_in_ntk_trains_as_the_built_in_one():
    """The built-in ntk MLP computes c·W x with raw W and c = 1/√fan_in; its exported weights are c·W, so the upload in
    ntk holds W again: the kernels, the Hessian, the path (loss, ΔK, ‖w − w₀‖ in the trained coordinates) agree in float64."""
    common = {
        "seed": 5,
        "dtype": "float64",
        "data": {"kind": "gaussian_mixture", "n_train": 12, "input_dim": 3, "classes": 2, "probe": {"n": 6}},
        "training": {"max_steps": 20, "lr": 0.5, "target_loss": None},
        "diagnostics": {
            "kernel": {"schedule": "every", "every": 5},
            "hessian": {"at": ["init", "final"], "probe_points": 2, "iterations": 30},
        },
    }
    builtin = JobSpec.model_validate(
        {**common, "model": {"hidden": [16], "activation": "tanh", "parameterization": "ntk"}}
    )
    net = build_network(builtin.model, (3,), seed=5, dtype=torch.float64)
    layer, readout = net.stages[0].layer, net.readout
    weights = [
        (layer.weight_multiplier * layer.weight).detach().numpy(),
        layer.bias.detach().numpy(),
        (readout.weight_multiplier * readout.weight).detach().numpy(),
        readout.bias.detach().numpy(),
    ]
    uploaded = JobSpec.model_validate(
        {
            **common,
            "model": {
                "kind": "onnx",
                "id": MODEL_ID,
                "parameterization": "ntk",
                "stored": {"parameters": 98, "input_shape": [3], "output_dim": 2},
            },
        }
    )
    expected = run(builtin, device="cpu")
    onnx_bytes = mlp_model(weights, activation="Tanh").SerializeToString()
    got = run(uploaded, device="cpu", uploads=Uploads(models={MODEL_ID: onnx_bytes}))
    for when in ("init", "final"):
        K0 = np.load(io.BytesIO(expected.artifacts[f"kernel_{when}.npy"].data))
        K1 = np.load(io.BytesIO(got.artifacts[f"kernel_{when}.npy"].data))
        assert np.linalg.norm(K1 - K0) / np.linalg.norm(K0) < 1e-10
        assert got.summary[f"hessian_norm_{when}"] == pytest.approx(expected.summary[f"hessian_norm_{when}"], rel=1e-9)
    for name in ("final_loss", "delta_k_max", "weight_change_l2", "weight_change_linf"):
        assert got.summary[name] == pytest.approx(expected.summary[name], rel=1e-9, abs=1e-14)

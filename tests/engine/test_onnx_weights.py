"""An uploaded ONNX network's saved weights carry the exported module's own parameter names and shapes."""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch
from torch import nn

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.artifacts import load_weights
from ntklab.engine.nets.onnx_model import build_onnx_network
from ntklab.engine.run import run
from ntklab.engine.uploads import Uploads
from ntklab.onnx_export import export_module

MODEL_ID = "mdl_" + "3" * 32
DATASET_ID = "ds_" + "3" * 32


class Nested(nn.Module):
    """Submodules in submodules: a Conv1d (held as a height-1 Conv2d), Linear layers (held transposed by a Gemm or a
    MatMul), a LayerNorm (a fallback parameter)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv1d(2, 3, 3), nn.Tanh())
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.LayerNorm(5), nn.Tanh())
        self.head = nn.ModuleDict({"out": nn.Linear(5, 2)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head["out"](self.f(self.features(x)))


def _spec(parameters: int) -> JobSpec:
    return JobSpec.model_validate(
        {
            "dtype": "float64",
            "model": {
                "kind": "onnx",
                "id": MODEL_ID,
                "stored": {"parameters": parameters, "input_shape": [2, 6], "output_dim": 2},
            },
            "data": {
                "kind": "dataset",
                "id": DATASET_ID,
                "n_train": 8,
                "probe": {"n": 4},
                "stored": {"points": 8, "x_shape": [2, 6], "x_integer": False, "y_width": 2},
            },
            "training": {"max_steps": 3, "lr": 0.1, "target_loss": None},
            "diagnostics": {
                "kernel": None,
                "hessian": None,
                "layer_sensitivity": False,
                "linearization_error": False,
                "save_kernels": [],
                "save_weights": True,
            },
        }
    )


def test_weights_are_saved_under_the_modules_parameter_names_and_load_back():
    torch.manual_seed(0)
    module = Nested().double()
    x = torch.randn(8, 2, 6, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        onnx_bytes = export_module(module, x)
    parameters = dict(module.named_parameters())
    uploads = Uploads(
        models={MODEL_ID: onnx_bytes}, datasets={DATASET_ID: (x.numpy(), np.random.default_rng(0).normal(size=(8, 2)))}
    )
    result = run(_spec(sum(p.numel() for p in parameters.values())), device="cpu", uploads=uploads)
    with np.load(io.BytesIO(result.artifacts["weights_init.npz"].data)) as init:
        assert sorted(init.files) == sorted(parameters)
        for name, value in parameters.items():
            np.testing.assert_array_equal(init[name], value.detach().numpy())
    final = result.artifacts["weights_final.npz"].data
    net = build_onnx_network(_spec(0).model, onnx_bytes, dtype=torch.float64)
    load_weights(net, final)
    with np.load(io.BytesIO(final)) as saved:
        assert sorted(saved.files) == sorted(parameters)
        for name, view in net.initializer_views().items():
            np.testing.assert_array_equal(view.detach().numpy(), saved[name])
        assert not np.array_equal(saved["head.out.weight"], parameters["head.out.weight"].detach().numpy())

"""Binary artifacts of a run: kernels and outputs (.npy), weights (.npz), reports (.json).

Weights are stored as one array per parameter — trainable and frozen — keyed by its
name in `net.named_parameters()` (e.g. "stages.0.layer.weight", "readout.bias"), in the
run's dtype, as the raw values before the layer's parameterization multiplier (a layer
computes c · x Wᵀ + b with c = 1/√fan_in under the NTK parameterization; the file holds W).
An uploaded ONNX network's are keyed and shaped as the initializers they came from, which
are the exported module's own parameters ("f.0.weight" [out, in], not the converter's
"layers.0.weight"): `np.load(file)[name]` is `module.state_dict()[name]` under the standard
parameterization; under ntk or mup a layer's weight is held divided by its multiplier m, as a built-in
network's file holds W before its c (multiply by m for the module's value: docs/models.md).
`load_weights` puts them back into a network built from the same spec.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from ntklab.engine.nets.base import TangentNetwork
from ntklab.engine.result import Artifact

NPY = "application/x-npy"
NPZ = "application/x-npz"
JSON = "application/json"


def npy_artifact(tensor: torch.Tensor) -> Artifact:
    """The tensor as a float64 .npy file."""
    buffer = io.BytesIO()
    np.save(buffer, tensor.detach().to("cpu", torch.float64).numpy())
    return Artifact(buffer.getvalue(), NPY)


def saved_parameters(net: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters (or views of them) a weights file holds, by the names it holds them under: a TangentNetwork's
    saved_parameters() (an uploaded ONNX model's are its initializers' names and shapes), any other module's
    named_parameters()."""
    return net.saved_parameters() if isinstance(net, TangentNetwork) else dict(net.named_parameters())


def weights_artifact(net: nn.Module) -> Artifact:
    """Every parameter of `net` as a named array of an .npz file."""
    buffer = io.BytesIO()
    np.savez(buffer, **{name: p.detach().cpu().numpy() for name, p in saved_parameters(net).items()})
    return Artifact(buffer.getvalue(), NPZ)


@torch.no_grad()
def load_weights(net: nn.Module, data: bytes) -> None:
    """Copy the arrays of a weights .npz into the parameters of the same names (all must match)."""
    with np.load(io.BytesIO(data)) as arrays:
        params = saved_parameters(net)
        if set(arrays.files) != set(params):
            raise ValueError(f"weights file holds {sorted(arrays.files)}, the network has {sorted(params)}")
        for name, p in params.items():
            p.copy_(torch.from_numpy(arrays[name]))


def json_artifact(payload: Any) -> Artifact:
    """UTF-8 JSON with every non-finite float replaced by null."""
    text = json.dumps(json_safe(payload), allow_nan=False, indent=1)
    return Artifact(text.encode(), JSON)


def json_safe(value: Any) -> Any:
    """Nested lists/dicts/tuples with NaN and ±Infinity mapped to None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value

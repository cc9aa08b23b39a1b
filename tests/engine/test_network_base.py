"""One network interface (engine/nets/base.py): every network the engine builds is a TangentNetwork, and the
diagnostics read a network's head, hidden layers and saved names from that type, not from what attributes a
module happens to have."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.artifacts import saved_parameters
from ntklab.engine.diagnostics.sensitivity import hidden_representations
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.nets.base import TangentNetwork, head_of
from ntklab.engine.nets.network import build_network
from tests.engine.onnx_ops.reference import converted, single_node


@pytest.mark.parametrize(
    "fields,shape",
    [
        ({"hidden": [4], "output_dim": 2, "output_activation": "softmax"}, (3,)),
        ({"kind": "cnn", "hidden": [2], "output_dim": 2, "output_activation": "tanh"}, (1, 4, 4)),
        ({"kind": "resnet", "hidden": [3], "output_dim": 2, "output_activation": "sigmoid"}, (2,)),
        (
            {"kind": "graph", "layers": [{"type": "dense", "width": 3}], "output_dim": 2, "output_activation": "swish"},
            (2,),
        ),
    ],
)
def test_every_built_network_is_a_tangent_network_with_its_specs_head(fields, shape):
    net = build_network(model_spec(**fields), shape, seed=0)
    assert isinstance(net, TangentNetwork) and head_of(net) == fields["output_activation"]
    assert net.kind == fields.get("kind", "mlp") and net.output_dim == 2


def test_an_onnx_network_is_a_tangent_network_saving_its_initializers_names():
    x = np.ones((2, 3), dtype=np.float32)
    net = converted(single_node("MatMul", ["x", "W"], x, {"W": np.ones((3, 2), dtype=np.float32)}))
    assert isinstance(net, TangentNetwork) and net.kind == "onnx"
    assert set(saved_parameters(net)) == {"W"} and saved_parameters(net)["W"].shape == (3, 2)


class Impostor(nn.Module):
    """A plain module that happens to carry the attributes a TangentNetwork has; it is not one."""

    def __init__(self) -> None:
        super().__init__()
        self.readout = nn.Linear(3, 2)
        self.head = "softmax"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.readout(torch.tanh(x))

    def forward_with_hidden(self, x: torch.Tensor):
        raise AssertionError("a plain module's hidden layers are found by hooks, not asked for")


def test_a_plain_module_is_read_as_a_plain_module_whatever_its_attributes():
    net = Impostor().double()
    x = torch.randn(4, 3, dtype=torch.float64)
    assert head_of(net) == "identity"
    logits, hidden = hidden_representations(net, x)
    torch.testing.assert_close(logits, net(x))
    assert hidden == []
    K = tangent_kernel(net, x, method="jacobian", of="outputs")
    torch.testing.assert_close(K, tangent_kernel(net, x, method="jacobian", of="logits"))

"""client.models.upload(module, x) exports the user's network exactly (ntklab/onnx_export.py): no BatchNorm folding,
buffers as constants, parameters checked by name and shape, outputs checked, and a named error when they differ."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from ntklab.api_schemas.uploads import trainable_initializers
from ntklab.errors import ExportMismatchError
from ntklab.onnx_export import check_outputs, check_parameters, export_module, parameter_aliases, reference_outputs
from tests.zoo.architectures import vgg_batchnorm


@pytest.fixture(autouse=True)
def quiet_exporter():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def trainable_of(onnx_bytes: bytes) -> dict[str, list[int]]:
    return dict(trainable_initializers(onnx.load_from_string(onnx_bytes).graph))


def folded_export(module: nn.Module, x: torch.Tensor) -> onnx.ModelProto:
    """torch.onnx.export's defaults on an eval-mode module: constant folding fuses each BatchNorm into its convolution."""
    buffer = io.BytesIO()
    torch.onnx.export(
        module.eval(),
        (x,),
        buffer,
        dynamo=False,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
    )
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_batchnorm_is_never_folded_and_the_parameters_are_the_modules(dynamo):
    """The regression test for folding: γ and β of every BatchNorm are uploaded as themselves (975 parameters, where the folded export has 943)."""
    member = vgg_batchnorm()
    wanted = {name: list(p.shape) for name, p in member.module.named_parameters()}
    exported = trainable_of(export_module(member.module, member.x, dynamo=dynamo))
    assert exported == wanted
    assert {"1.weight", "1.bias"} <= set(exported), "the first BatchNorm's γ and β are parameters"


def test_the_exporters_default_folding_is_what_the_check_refuses():
    """Control: torch's default export folds the BatchNorms; the parameter check names the lost γ/β and the fused weights."""
    member = vgg_batchnorm()
    folded = folded_export(member.module, member.x)
    with pytest.raises(
        ExportMismatchError, match=r"975 in 14; missing from the export: 0.bias, 0.weight, 1.bias, 1.weight"
    ) as refused:
        check_parameters(folded, parameter_aliases(member.module))
    assert "1.weight" in refused.value.missing and refused.value.extra, "the fused convolution weights have other names"


def test_float_buffers_and_frozen_parameters_become_constants():
    class WithBuffers(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.frozen = nn.Linear(3, 2), nn.Linear(2, 2)
            self.frozen.requires_grad_(False)
            self.register_buffer("scale", torch.tensor([2.0, 0.5, 1.0]))

        def forward(self, x):
            return self.frozen(torch.tanh(self.fc(x * self.scale)))

    torch.manual_seed(0)
    module = WithBuffers().double()
    x = torch.randn(4, 3, dtype=torch.float64)
    onnx_bytes = export_module(module, x)
    assert trainable_of(onnx_bytes) == {"fc.weight": [2, 3], "fc.bias": [2]}
    constants = [n.output[0] for n in onnx.load_from_string(onnx_bytes).graph.node if n.op_type == "Constant"]
    assert {"scale", "frozen.weight", "frozen.bias"} <= set(constants)


def test_other_outputs_are_refused_with_the_largest_difference():
    member = vgg_batchnorm()
    proto = onnx.load_from_string(export_module(member.module, member.x))
    head = next(t for t in proto.graph.initializer if t.name == "12.bias")
    head.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(head) + 0.5, head.name))
    with torch.no_grad():
        expected = member.module(member.x)
    with pytest.raises(ExportMismatchError, match="outputs differ") as refused:
        check_outputs(proto, member.x, expected)
    assert refused.value.max_difference == pytest.approx(0.5, rel=1e-9)


def test_without_the_worker_the_reference_evaluator_gives_the_modules_outputs():
    member = vgg_batchnorm()
    proto = onnx.load_from_string(export_module(member.module, member.x))
    with torch.no_grad():
        expected = member.module(member.x).numpy()
    np.testing.assert_allclose(reference_outputs(proto, member.x), expected, rtol=1e-9, atol=1e-12)


def test_tied_parameters_are_one_parameter_under_either_name():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(7, 4)
            self.readout = nn.Linear(4, 7, bias=False)
            self.readout.weight = self.embed.weight

        def forward(self, t):
            return self.readout(self.embed(t).mean(1))

    module = Tied().double()
    assert parameter_aliases(module) == {
        "embed.weight": ("embed.weight", [7, 4]),
        "readout.weight": ("embed.weight", [7, 4]),
    }
    onnx_bytes = export_module(module, torch.randint(0, 7, (3, 5)))
    assert list(trainable_of(onnx_bytes).values()) == [[7, 4]]

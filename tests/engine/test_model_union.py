"""The model section is a union chosen by `model.kind` (mlp when left out), and every spec stored before it
was one still validates, with the same meaning: the old flat model's dump carried every kind's fields, which
each member leaves out (as they were ignored), while `layers`, `id` and `stored` of another kind are refused when set."""

import pytest
from pydantic import ValidationError

from ntklab.api_schemas.spec import (
    CnnModel,
    GraphModel,
    JobSpec,
    MlpModel,
    OnnxModel,
    ResnetModel,
    model_spec,
)
from tests.engine.spec_errors import error_text

FLAT_DEFAULTS = {
    "layers": None,
    "hidden": [1000],
    "activation": "relu",
    "output_activation": "identity",
    "output_dim": None,
    "parameterization": "ntk",
    "bias": True,
    "train_output_layer": True,
    "kernel_size": 3,
    "stride": 1,
    "padding": 1,
    "readout": "global_avg",
    "input_shape": None,
    "blocks": 2,
    "block": "fc",
    "id": None,
    "stored": None,
}
STORED = {
    "parameters": 10,
    "input_shape": [3],
    "output_dim": 2,
    "input_integer": False,
    "activation_elements": None,
    "forward_flops": None,
    "constant_bytes": None,
    "constant_elements": None,
    "folding_flops": None,
    "fixed_elements": None,
    "fixed_flops": None,
    "input_vocabulary": None,
    "nodes": None,
}
# model_dump(mode="json") of the flat ModelSpec before the union (main at 967a7af), one per kind
OLD_DUMPS = [
    (MlpModel, {**FLAT_DEFAULTS, "kind": "mlp", "hidden": [16, 8], "activation": ["tanh", "relu"], "output_dim": 3}),
    (
        CnnModel,
        {
            **FLAT_DEFAULTS,
            "kind": "cnn",
            "hidden": [4, 4],
            "kernel_size": 5,
            "stride": 2,
            "padding": 2,
            "readout": "flatten",
            "input_shape": [1, 8, 8],
        },
    ),
    (
        ResnetModel,
        {**FLAT_DEFAULTS, "kind": "resnet", "hidden": [8, 8, 8], "block": "conv", "parameterization": "standard"},
    ),
    (
        GraphModel,
        {
            **FLAT_DEFAULTS,
            "kind": "graph",
            "layers": [{"type": "dense", "width": 8, "bias": None}, {"type": "activation", "name": "tanh"}],
            "input_shape": [16],
        },
    ),
    (
        OnnxModel,
        {
            **FLAT_DEFAULTS,
            "kind": "onnx",
            "output_dim": 2,
            "parameterization": "standard",
            "id": "mdl_" + "a" * 32,
            "stored": STORED,
        },
    ),
]
DATA = {
    "mlp": {"kind": "gaussian_mixture", "classes": 3},
    "cnn": {"kind": "builtin", "name": "digits"},
    "resnet": {"kind": "builtin", "name": "digits"},
    "graph": {"kind": "gaussian_mixture", "input_dim": 16},
    "onnx": {"kind": "dataset", "id": "ds_" + "b" * 32},
}


@pytest.mark.parametrize(("member", "dump"), OLD_DUMPS, ids=[dump["kind"] for _, dump in OLD_DUMPS])
def test_an_old_stored_model_validates_with_the_same_meaning(member, dump):
    model = model_spec(**dump)
    assert type(model) is member
    kept = [name for name, field in member.model_fields.items() if not field.exclude]  # not the refused-only `layers`
    assert model.model_dump(mode="json") == {name: dump[name] for name in kept}


@pytest.mark.parametrize(("member", "dump"), OLD_DUMPS, ids=[dump["kind"] for _, dump in OLD_DUMPS])
def test_an_old_stored_job_spec_validates(member, dump):
    """Job.spec is validated when a job is read (GET /v1/jobs/{id}): every section dumped whole, the model flat."""
    document = {**JobSpec(data=DATA[dump["kind"]]).model_dump(mode="json"), "model": dump}
    assert type(JobSpec.model_validate(document).model) is member


def test_a_model_without_kind_is_an_mlp():
    assert type(JobSpec().model) is MlpModel
    assert type(JobSpec.model_validate({"model": {"hidden": [3]}}).model) is MlpModel
    assert type(model_spec(hidden=[3])) is MlpModel


def test_another_kinds_field_is_ignored_as_before():
    model = model_spec(hidden=[3], kernel_size=5, blocks=4, readout="flatten")
    assert model == model_spec(hidden=[3]) and not hasattr(model, "kernel_size")


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ({"id": "mdl_" + "a" * 32}, "model.id is for model.kind = 'onnx' only (this model is 'mlp')"),
        ({"kind": "graph", "layers": [{"type": "dense", "width": 2}], "stored": STORED}, "model.stored is for"),
        ({"kind": "onnx"}, "model.id is required for model.kind = 'onnx'"),
        ({"kind": "mlp", "parameterization": "mup"}, "'mup' is not a parameterization of model.kind = 'mlp'"),
        ({"kind": "perceptron"}, "model"),
    ],
)
def test_a_wrong_model_is_refused_naming_the_field(model, named):
    assert named in error_text({"model": model})


ONNX_ID = {"onnx": {"id": "mdl_" + "a" * 32}}


@pytest.mark.parametrize("kind", ["mlp", "cnn", "resnet", "onnx"])
def test_layers_on_another_kind_are_refused_at_model_layers_as_before_the_union(kind):
    assert f"model.layers: Value error, model.layers is for model.kind = 'graph' only (this model is {kind!r})" in (
        error_text({"model": {"kind": kind, "layers": [{"type": "dense", "width": 3}]} | ONNX_ID.get(kind, {})})
    )


def test_an_onnx_model_is_standard_by_default():
    assert model_spec(kind="onnx", id="mdl_" + "a" * 32).parameterization == "standard"
    with pytest.raises(ValidationError):
        model_spec(kind="onnx", id="mdl_" + "a" * 32, parameterization="meanfield")

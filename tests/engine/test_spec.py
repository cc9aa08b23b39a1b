"""Specs that make no sense fail validation with the offending field named."""

import pytest

from ntklab.api_schemas.spec import JobSpec
from tests.engine.spec_errors import error_text


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"model": {"output_activation": "softmax", "output_dim": 1}}, "model.output_dim"),
        ({"data": {"kind": "sine1d"}, "model": {"output_activation": "softmax"}}, "model.output_dim"),
        ({"model": {"activation": "sigmoidish"}}, "model.activation"),
        ({"model": {"hidden": [100, 0]}}, "model.hidden.1"),
        ({"data": {"kind": "gaussian_mixture", "n_train": 10, "probe": {"n": 11}}}, "data.probe.n"),
        ({"data": {"kind": "builtin", "name": "iris", "n_train": 151}}, "data.n_train"),
        ({"model": {"hidden": [8, 8], "activation": ["relu"]}}, "model.activation"),
        ({"model": {"output_dim": 3}}, "model.output_dim"),
        ({"model": {"kind": "cnn", "hidden": [4]}}, "model.input_shape"),
        ({"model": {"kind": "cnn", "hidden": [4], "input_shape": [1, 4, 5]}}, "model.input_shape"),
        ({"model": {"output_activation": "swish"}, "training": {"loss": "cross_entropy"}}, "training.loss"),
        ({"diagnostics": {"kernel": {"schedule": "every"}}}, "diagnostics.kernel.every"),
        ({"data": {"kind": "inline", "x": [[1.0], [2.0, 3.0]], "y": [1.0, 2.0]}}, "data.x"),
        ({"data": {"kind": "inline", "x": [[1.0], [2.0]], "y": [1.0]}}, "data.y"),
        ({"training": {"lr": float("nan")}}, "training.lr"),
    ],
)
def test_nonsense_is_refused_naming_the_field(spec, named):
    assert named in error_text(spec)


def test_output_dim_is_inferred_from_the_targets():
    assert JobSpec.model_validate({"data": {"kind": "gaussian_mixture", "classes": 5}}).model.output_dim == 5
    assert (
        JobSpec.model_validate({"data": {"kind": "builtin", "name": "digits", "targets": "label"}}).model.output_dim
        == 1
    )
    assert JobSpec.model_validate(
        {"data": {"kind": "builtin", "name": "digits"}, "model": {"kind": "cnn", "hidden": [4]}}
    ).image_shape() == (1, 8, 8)

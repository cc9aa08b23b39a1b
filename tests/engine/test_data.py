"""Data sets: shapes, determinism, class balance, standardization and the probe subset."""

import numpy as np
import pytest
import torch

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.training.data import load_data, standardize


def spec(data: dict, **model) -> JobSpec:
    return JobSpec.model_validate({"data": data, "model": {"hidden": [8], **model}})


@pytest.mark.parametrize(
    "data, x_shape, y_shape",
    [
        ({"kind": "gaussian_mixture", "n_train": 30, "input_dim": 5, "classes": 3}, (30, 5), (30, 3)),
        ({"kind": "gaussian_mixture", "n_train": 30, "input_dim": 5, "targets": "signed"}, (30, 5), (30, 1)),
        ({"kind": "sine1d", "n_train": 12}, (12, 1), (12, 1)),
        ({"kind": "builtin", "name": "digits", "n_train": 40}, (40, 64), (40, 10)),
        ({"kind": "builtin", "name": "iris", "n_train": 150}, (150, 4), (150, 3)),
        ({"kind": "builtin", "name": "breast_cancer", "n_train": 20, "targets": "label"}, (20, 30), (20, 1)),
        ({"kind": "builtin", "name": "two_moons", "n_train": 50}, (50, 2), (50, 2)),
        ({"kind": "inline", "x": [[1, 2], [3, 4], [5, 6]], "y": [1, 0, 1]}, (3, 2), (3, 1)),
    ],
)
def test_shapes(data, x_shape, y_shape):
    d = load_data(spec(data))
    assert tuple(d.x_train.shape) == x_shape and tuple(d.y_train.shape) == y_shape
    assert d.input_shape == x_shape[1:]
    assert d.x_train.dtype == torch.float32


def test_digits_are_images_in_unit_interval_for_a_cnn():
    d = load_data(spec({"kind": "builtin", "name": "digits", "n_train": 40}, kind="cnn"), dtype=torch.float64)
    assert tuple(d.x_train.shape) == (40, 1, 8, 8) and d.input_shape == (1, 8, 8)
    assert d.x_train.min() == 0.0 and d.x_train.max() == 1.0
    assert d.x_train.dtype == torch.float64


def test_same_seed_same_data_other_seed_other_data():
    data = {"kind": "gaussian_mixture", "n_train": 20, "input_dim": 4, "seed": 3}
    a, b = load_data(spec(data)), load_data(spec(data))
    c = load_data(spec({**data, "seed": 4}))
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    assert not torch.equal(a.x_train, c.x_train)


def test_gaussian_mixture_classes_are_balanced_and_centred_on_their_means():
    d = load_data(spec({"kind": "gaussian_mixture", "n_train": 3001, "input_dim": 3, "classes": 3, "sigma": 0.1}))
    counts = d.y_train.sum(0)
    assert counts.max() - counts.min() <= 1 and counts.sum() == 3001
    labels = d.y_train.argmax(1)
    for c in range(3):
        spread = d.x_train[labels == c].std(0)
        assert torch.allclose(spread, torch.full((3,), 0.1), rtol=0.1)


def test_signed_and_label_targets():
    data = {"kind": "gaussian_mixture", "n_train": 9, "input_dim": 2, "classes": 3}
    onehot = load_data(spec(data)).y_train.argmax(1).double()
    label = load_data(spec({**data, "targets": "label"})).y_train[:, 0].double()
    signed = load_data(spec({**data, "targets": "signed"})).y_train[:, 0].double()
    assert torch.equal(label, onehot)
    assert torch.equal(signed, label - 1.0)


def test_standardization_zscores_each_feature_on_the_training_set():
    data = {"kind": "builtin", "name": "breast_cancer", "n_train": 100, "standardize": True}
    x = load_data(spec(data), dtype=torch.float64).x_train.numpy()
    np.testing.assert_allclose(x.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(x.std(0), 1.0, rtol=1e-12)


def test_standardize_only_centres_a_constant_feature():
    x = np.array([[1.0, 5.0], [3.0, 5.0]])
    np.testing.assert_array_equal(standardize(x), [[-1.0, 0.0], [1.0, 0.0]])


def test_probe_is_the_first_training_points():
    d = load_data(spec({"kind": "gaussian_mixture", "n_train": 100, "probe": {"n": 7}}))
    assert torch.equal(d.x_probe, d.x_train[:7])
    assert len(load_data(spec({"kind": "gaussian_mixture", "n_train": 100})).x_probe) == 64


def test_builtin_subset_larger_than_the_data_set_names_the_field():
    with pytest.raises(ValueError, match="data.n_train"):
        load_data(spec({"kind": "builtin", "name": "iris", "n_train": 151}))

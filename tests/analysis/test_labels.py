"""The paper's symbols for spec paths, summary scalars, series and fit groups (analysis/labels.py)."""

from __future__ import annotations

import pytest

from ntklab.analysis.labels import axis_label, group_label, is_bottleneck, series_label


@pytest.mark.parametrize(
    ("path", "hidden", "label"),
    [
        ("model.hidden.0", None, "width m"),
        ("model.hidden.0", [200, 3, 200], "width m"),
        ("model.hidden.1", [200, 3, 200], "bottleneck width m_b"),
        ("model.hidden.1", [64, 64], "width of hidden layer 2"),
        ("model.hidden.1", [200, 300, 200], "width of hidden layer 2"),
        ("delta_k_max", None, "ΔK"),
        ("hessian_norm_init", None, "‖H‖ at init"),
        ("hessian_kernel_ratio_init", None, "‖H‖ / ‖∇f‖² at init"),
        ("weight_change_l2", None, "‖w* − w₀‖₂"),
        ("weight_change_linf", None, "‖w* − w₀‖∞"),
        ("my_scalar", None, "my_scalar"),
        ("model.depth", None, "model.depth"),
    ],
)
def test_axis_labels_come_from_the_table_and_unknown_names_keep_their_own(path, hidden, label):
    assert axis_label(path, hidden) == label


def test_a_bottleneck_needs_two_wider_neighbours():
    assert is_bottleneck([100, 5, 100], 1)
    assert not is_bottleneck([100, 5], 1) and not is_bottleneck([5, 100, 100], 0)
    assert not is_bottleneck([100, 5, 4], 1) and not is_bottleneck([], 1)


@pytest.mark.parametrize(
    ("group", "label"),
    [
        ({"model.output_activation": "identity"}, "linear head"),
        ({"model.output_activation": "swish"}, "swish head"),
        ({"name": "linear head"}, "linear head"),
        ({"model.parameterization": "meanfield"}, "meanfield"),
        ({"seed": 0}, "seed = 0"),
        ({"model.output_activation": "softmax", "model.activation": "relu"}, "softmax head, activation = relu"),
        ({}, "all"),
    ],
)
def test_group_labels_name_the_group_not_the_path(group, label):
    assert group_label(group) == label


def test_series_labels_tell_the_logits_from_the_outputs():
    assert series_label("delta_k") == "ΔK(t) of the outputs φ(f)"
    assert series_label("delta_k_logits") == "ΔK(t) of the logits f"
    assert series_label("my_series") == "my_series"

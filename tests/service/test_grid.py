import pytest

from ntklab.service.grid import GridError, expand_grid, grid_size


def test_cartesian_product_over_paths_and_list_items():
    base = {"model": {"hidden": [64, 5, 64], "activation": ["tanh", "identity", "tanh"]}}
    grid = {"model.hidden.1": [3, 10], "model.output_activation": ["identity", "swish"], "seed": [0, 1, 2]}
    points = expand_grid(base, grid)
    assert grid_size(grid) == len(points) == 12
    assert {(p.spec.model.hidden[1], p.spec.model.output_activation, p.spec.seed) for p in points} == {
        (b, h, s) for b in (3, 10) for h in ("identity", "swish") for s in (0, 1, 2)
    }
    assert all(p.spec.model.hidden[0] == p.spec.model.hidden[2] == 64 for p in points)
    assert points[0].values == {"model.hidden.1": 3, "model.output_activation": "identity", "seed": 0}


def test_inferred_output_dim_follows_the_grid():
    points = expand_grid({"data": {"kind": "gaussian_mixture"}}, {"data.classes": [2, 5]})
    assert [p.spec.model.output_dim for p in points] == [2, 5]


def test_path_outside_a_list_is_named():
    with pytest.raises(GridError) as error:
        expand_grid({"model": {"hidden": [10]}}, {"model.hidden.3": [5]})
    assert error.value.field == "model.hidden.3"
    assert "outside a list of 1" in str(error.value)


def test_unknown_key_and_invalid_value_are_named():
    with pytest.raises(GridError) as error:
        expand_grid({}, {"model.widths.0": [5]})
    assert error.value.field == "model.widths.0"
    with pytest.raises(GridError) as error:
        expand_grid({}, {"model.hidden.0": [10, 0]})
    assert error.value.field == "model.hidden.0" and "grid point" in str(error.value)


def test_invalid_base_is_named():
    with pytest.raises(GridError) as error:
        expand_grid({"model": {"activation": "nope"}}, {"seed": [0]})
    assert error.value.field.startswith("model.activation")


def test_linked_axis_moves_paths_together():
    base = {"model": {"hidden": [10, 3, 10]}}
    points = expand_grid(base, {"model.hidden.0,model.hidden.2": [[100, 100], [1000, 1000]], "seed": [0, 1]})
    assert [(p.spec.model.hidden, p.spec.seed) for p in points] == [
        ([100, 3, 100], 0),
        ([100, 3, 100], 1),
        ([1000, 3, 1000], 0),
        ([1000, 3, 1000], 1),
    ]
    assert points[0].values == {"model.hidden.0": 100, "model.hidden.2": 100, "seed": 0}


def test_linked_axis_with_wrong_arity_is_named():
    with pytest.raises(GridError) as error:
        expand_grid({"model": {"hidden": [10, 3, 10]}}, {"model.hidden.0,model.hidden.2": [[100]]})
    assert error.value.field == "model.hidden.0,model.hidden.2"

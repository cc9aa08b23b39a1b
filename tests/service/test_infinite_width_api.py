"""POST /v1/jobs refuses diagnostics.infinite_width for a model without a limit: a 422 naming the field and the layer."""

from __future__ import annotations

import pytest

DATA = {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}


@pytest.mark.parametrize(
    "model,named",
    [
        ({"hidden": [8], "parameterization": "meanfield"}, "model.parameterization 'meanfield'"),
        (
            {
                "kind": "graph",
                "input_shape": [1, 2, 2],
                "layers": [{"type": "conv2d", "width": 4}, {"type": "max_pool", "kernel_size": 2}, {"type": "flatten"}],
            },
            "model.layers.1 (max_pool)",
        ),
    ],
)
def test_a_model_without_a_limit_is_a_422_naming_it(client, model, named):
    answer = client.post("/v1/jobs", json={"model": model, "data": DATA, "diagnostics": {"infinite_width": {}}})
    assert answer.status_code == 422
    assert answer.headers["content-type"].startswith("application/problem+json")
    (error,) = answer.json()["errors"]
    assert error["field"] == "diagnostics" and named in error["message"]


def test_a_model_with_a_limit_is_accepted(client):
    answer = client.post(
        "/v1/jobs",
        json={
            "model": {"hidden": [8], "activation": "gelu"},
            "data": DATA,
            "diagnostics": {"infinite_width": {"quadrature_tolerance": 1e-8}},
        },
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["spec"]["diagnostics"]["infinite_width"] == {"quadrature_tolerance": 1e-8}

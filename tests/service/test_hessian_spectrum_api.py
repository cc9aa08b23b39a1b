"""POST /v1/jobs with the Hessian-spectrum and loss-Hessian blocks: accepted as sent, or a 422 naming the field and the limit."""

from __future__ import annotations

DATA = {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}


def test_both_blocks_are_accepted_and_kept(client):
    diagnostics = {"hessian_spectrum": {"of": "model", "points": 2, "probes": 8}, "loss_hessian": {"iterations": 16}}
    answer = client.post("/v1/jobs", json={"model": {"hidden": [8]}, "data": DATA, "diagnostics": diagnostics})
    assert answer.status_code == 202, answer.text
    kept = answer.json()["spec"]["diagnostics"]
    assert kept["hessian_spectrum"]["of"] == "model" and kept["hessian_spectrum"]["probes"] == 8
    assert kept["loss_hessian"] == {"iterations": 16, "tolerance": 1e-6}


def test_a_training_set_kernel_over_the_limit_is_a_422_naming_the_field(client):
    data = {**DATA, "n_train": 5000, "classes": 2}
    answer = client.post("/v1/jobs", json={"model": {"hidden": [8]}, "data": data, "diagnostics": {"loss_hessian": {}}})
    assert answer.status_code == 422
    assert answer.headers["content-type"].startswith("application/problem+json")
    (error,) = answer.json()["errors"]
    assert error["field"] == "diagnostics"
    assert (
        "diagnostics.loss_hessian" in error["message"]
        and "10000 rows" in error["message"]
        and "4096" in error["message"]
    )


def test_a_probe_count_over_its_bound_is_a_422_with_the_limit(client):
    answer = client.post("/v1/jobs", json={"data": DATA, "diagnostics": {"hessian_spectrum": {"probes": 1001}}})
    assert answer.status_code == 422
    (error,) = answer.json()["errors"]
    assert error["field"] == "diagnostics.hessian_spectrum.probes" and error["limit"] == 1000

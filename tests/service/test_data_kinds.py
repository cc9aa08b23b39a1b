"""A data section without `kind` is the default data; a wrong kind is one error on `data.kind` listing the kinds
(issue 26, item 1).

Before, `{"data": {"n_train": 32}}` — docs/sdk.md's sweep — was a 422 "data: Unable to extract tag using
discriminator 'kind'", and the SDK printed it twice ("base: data: …" then "data: base: data: …"). Each message
below names its field once: in `detail` and in the SDK's exception text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ntklab.client import Client
from ntklab.errors import APIStatusError
from ntklab.service.grid import grid_size

DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"
KINDS = "'gaussian_mixture', 'sine1d', 'builtin', 'inline' or 'dataset'"
QUICK = {"training": {"max_steps": 1}, "diagnostics": {"hessian": None, "save_kernels": [], "save_weights": False}}


def docs_sweep() -> dict:
    """The sweep docs/sdk.md's complete example passes to client.sweeps.create, as written."""
    match = re.search(r"client\.sweeps\.create\((\{.*?\})\)\n", DOC.read_text(), re.S)
    assert match, "docs/sdk.md lost its sweep example"
    return ast.literal_eval(match.group(1))


def test_a_data_section_without_kind_is_the_default_data(client):
    answer = client.post("/v1/jobs", json={"data": {"n_train": 8, "sigma": 0.5}, **QUICK})
    assert answer.status_code == 202, answer.text
    explicit = client.post("/v1/jobs", json={"data": {"kind": "gaussian_mixture", "n_train": 8, "sigma": 0.5}, **QUICK})
    assert answer.json()["spec"]["data"] == explicit.json()["spec"]["data"]
    assert answer.json()["spec"]["data"]["kind"] == "gaussian_mixture"


def test_the_docs_sweep_without_a_data_kind_is_accepted(client):
    sweep = docs_sweep()
    assert "kind" not in sweep["base"]["data"], "the docs' sweep is the case of a data section without kind"
    answer = client.post("/v1/sweeps", json=sweep)
    assert answer.status_code == 202, answer.text
    assert answer.json()["total"] == grid_size(sweep["grid"])


def test_a_wrong_kind_is_one_error_on_data_kind_listing_the_kinds(client):
    answer = client.post("/v1/jobs", json={"data": {"kind": "mnist", "n_train": 8}})
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["errors"] == [{"field": "data.kind", "message": f"Input should be {KINDS}", "value": "mnist"}]
    assert body["detail"] == f"data.kind: Input should be {KINDS}"


def test_a_graph_layer_without_type_lists_the_layer_types(client):
    answer = client.post(
        "/v1/jobs", json={"model": {"kind": "graph", "layers": [{"type": "dense", "width": 4}, {"width": 4}]}}
    )
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["errors"]
    assert error["field"] == "model.layers.1.type"
    assert error["message"].startswith("Field required: one of 'dense', 'conv2d'") and "'residual'" in error["message"]


def test_a_message_that_names_its_field_is_not_prefixed_again(client):
    answer = client.post("/v1/jobs", json={"data": {"n_train": 4, "probe": {"n": 10}}})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"] == "data.probe.n = 10 exceeds the 4 training points"


def test_a_sweep_base_with_a_wrong_kind_names_the_field_once(client):
    sweep = docs_sweep()
    sweep["base"]["data"]["kind"] = "mnist"
    answer = client.post("/v1/sweeps", json=sweep)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["detail"] == f"base: data.kind: Input should be {KINDS}"
    assert body["errors"] == [{"field": "data.kind", "message": f"Input should be {KINDS}"}]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_sdk_says_a_refusal_once(client):
    sweep = docs_sweep()
    sweep["base"]["data"]["kind"] = "mnist"
    sdk = Client(base_url="http://testserver", http_client=client, max_retries=0)
    with pytest.raises(APIStatusError) as refused:
        sdk.sweeps.create(sweep)
    text = str(refused.value)
    assert text == f"422 Request failed validation: base: data.kind: Input should be {KINDS}", text

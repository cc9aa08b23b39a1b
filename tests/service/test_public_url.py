"""Location headers follow the address a request came to (its Host and port) unless NTKLAB_PUBLIC_URL is set.

tests/integration/test_public_url.py checks the same through a real `ntklab up --port P`.
"""

from __future__ import annotations

import pytest

SMALL_JOB = {
    "model": {"hidden": [8]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4, "probe": {"n": 4}},
    "training": {"max_steps": 5, "target_loss": None, "lr": 0.1},
    "diagnostics": {"hessian": None},
}


@pytest.mark.parametrize("public_url", [None, "", "https://ntk.example.org/lab"])  # "" is compose's unset
def test_locations_follow_the_request_unless_the_public_url_is_set(client_with, public_url):
    client = client_with(public_url=public_url)
    host = "lab-box:8100"
    job = client.post("/v1/jobs", json=SMALL_JOB, headers={"Host": host})
    sweep = client.post("/v1/sweeps", json={"base": SMALL_JOB, "grid": {"seed": [0]}}, headers={"Host": host})
    preset = client.post("/v1/presets/param-check", json={"scale": "smoke"}, headers={"Host": host})
    assert [job.status_code, sweep.status_code, preset.status_code] == [202, 202, 202], (
        job.text,
        sweep.text,
        preset.text,
    )
    base = public_url or f"http://{host}"
    assert job.headers["Location"] == f"{base}/v1/jobs/{job.json()['id']}"
    assert sweep.headers["Location"] == f"{base}/v1/sweeps/{sweep.json()['id']}"
    assert preset.headers["Location"] == f"{base}/v1/sweeps/{preset.json()['id']}"

"""Uploads through the SDK on a live stack (API + celery worker, both stacks): a data set and an ONNX MLP,
jobs on them, and the uploaded MLP measured against the built-in standard MLP with the same weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ntklab import errors
from ntklab.api_schemas.spec import AnyModel, model_spec
from ntklab.client import Client
from ntklab.engine.nets.network import build_network

pytestmark = [pytest.mark.slow, pytest.mark.stack]

D, WIDTH, OUT, N = 3, 16, 2, 12
DIAGNOSTICS = {
    "kernel": {"schedule": "every", "every": 5},
    "hessian": {"at": ["init", "final"], "probe_points": 2, "iterations": 30},
    "save_kernels": ["init", "final"],
}
TRAINING = {"max_steps": 20, "lr": 0.05, "target_loss": None}


@pytest.fixture(scope="module")
def client(live_stack):
    with Client(base_url=live_stack.url, max_retries=0) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def dataset(client):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(N, D)), rng.normal(size=(N, OUT))
    return client.datasets.upload(torch.as_tensor(x), y, name="live-points")


def builtin_standard_mlp(seed: int) -> tuple[AnyModel, nn.Sequential]:
    """The built-in standard MLP and a torch.nn.Sequential holding the same float64 weights."""
    spec = model_spec(hidden=[WIDTH], activation="tanh", parameterization="standard", output_dim=OUT)
    net = build_network(spec, (D,), seed=seed, dtype=torch.float64)
    copy = nn.Sequential(nn.Linear(D, WIDTH), nn.Tanh(), nn.Linear(WIDTH, OUT)).double()
    with torch.no_grad():
        for target, source in ((copy[0], net.stages[0].layer), (copy[2], net.readout)):
            target.weight.copy_(source.weight)
            target.bias.copy_(source.bias)
    return spec, copy


def test_a_data_set_uploaded_through_the_sdk_trains_a_job(client, dataset):
    assert dataset.points == N and dataset.x.shape == [N, D] and dataset.x.dtype == "float64"
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(N, D)), rng.normal(size=(N, OUT))
    assert client.datasets.upload(x, y).id == dataset.id, "the same arrays (sent as numpy, not torch) are stored once"
    assert dataset.id in [item.id for item in client.datasets.list()]
    job = client.jobs.create(
        {
            "model": {"hidden": [32]},
            "data": {"kind": "dataset", "id": dataset.id, "n_train": 10, "probe": {"n": 4}},
            "training": {"max_steps": 10, "lr": 0.05, "target_loss": None},
            "diagnostics": {"hessian": None},
        }
    )
    done = client.jobs.wait(job.id, timeout=120, progress=False)
    assert done.summary["steps"] == 10 and np.isfinite(done.summary["final_loss"])
    assert done.spec["data"]["stored"] == {
        "points": N,
        "x_shape": [D],
        "x_integer": False,
        "y_width": OUT,
        "x_min": None,
        "x_max": None,
        "y_integer": False,
        "y_min": None,
        "y_max": None,
    }


def test_an_onnx_mlp_matches_the_built_in_standard_mlp_to_1e_10(client, dataset):
    seed = 3
    _, module = builtin_standard_mlp(seed)
    model = client.models.upload(module, torch.zeros(4, D, dtype=torch.float64), name="standard-mlp")
    assert model.parameters == D * WIDTH + WIDTH + WIDTH * OUT + OUT
    assert model.inputs[0].shape[1:] == [D] and model.outputs[0].shape[1:] == [OUT] and "Gemm" in model.operators
    common = {
        "seed": seed,
        "dtype": "float64",
        "data": {"kind": "dataset", "id": dataset.id, "probe": {"n": 6}},
        "training": TRAINING,
        "diagnostics": DIAGNOSTICS,
    }
    builtin = client.jobs.create(
        {**common, "model": {"hidden": [WIDTH], "activation": "tanh", "parameterization": "standard"}}
    )
    uploaded = client.jobs.create({**common, "model": {"kind": "onnx", "id": model.id}})
    builtin = client.jobs.wait(builtin.id, timeout=180, progress=False)
    uploaded = client.jobs.wait(uploaded.id, timeout=180, progress=False)
    assert uploaded.summary["kernel_method"] == "structured" and uploaded.summary["parameters"] == model.parameters
    for when in ("init", "final"):
        K0 = client.jobs.artifact(builtin.id, f"kernel_{when}.npy")
        K1 = client.jobs.artifact(uploaded.id, f"kernel_{when}.npy")
        assert np.linalg.norm(K1 - K0) / np.linalg.norm(K0) < 1e-10
        assert uploaded.summary[f"hessian_norm_{when}"] == pytest.approx(
            builtin.summary[f"hessian_norm_{when}"], rel=1e-10
        )
    assert uploaded.summary["final_loss"] == pytest.approx(builtin.summary["final_loss"], rel=1e-9)


def test_uploads_refused_and_deleted_through_the_sdk(client, tmp_path):
    with pytest.raises(errors.UnprocessableEntityError) as refused:
        client.datasets.upload(np.array([[np.nan, 1.0]]), np.zeros(1))
    assert refused.value.fields == ["x"]
    checkpoint = tmp_path / "net.pt"
    checkpoint.write_bytes(b"\x80\x04not really")
    with pytest.raises(ValueError, match="arbitrary code"):
        client.models.upload(checkpoint)
    path = tmp_path / "net.onnx"
    path.write_bytes(b"\x80\x04\x95pickled")
    with pytest.raises(errors.UnprocessableEntityError, match="pickle"):
        client.models.upload(path)
    extra = client.datasets.upload(np.ones((3, 2)), np.ones(3))
    client.datasets.delete(extra)
    with pytest.raises(errors.NotFoundError):
        client.datasets.retrieve(extra.id)

"""client.datasets and client.models (sync and async) against the real service app on SQLite, and their retries."""

from __future__ import annotations

import asyncio
import io
import warnings

import httpx
import numpy as np
import pytest
import torch
from torch import nn

from ntklab import errors
from ntklab.client import AsyncClient, Client
from ntklab.onnx_export import export_module
from tests.upload_files import mlp_onnx


def points(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(10, 3)), rng.normal(size=(10, 2))


def test_upload_numpy_or_torch_or_a_file_list_retrieve_delete(client, tmp_path):
    x, y = points()
    first = client.datasets.upload(x, y, name="points")
    assert first.points == 10 and first.x.shape == [10, 3] and first.name == "points"
    assert client.datasets.upload(torch.as_tensor(x), torch.as_tensor(y)).id == first.id, "tensors send the same arrays"
    path = tmp_path / "data.npz"
    np.savez(path, x=x, y=y)
    assert client.datasets.upload(path).id == first.id
    tokens = client.datasets.upload(torch.randint(0, 9, (4, 5)), torch.zeros(4))
    assert tokens.x.dtype == "int64"
    assert [d.id for d in client.datasets.list(limit=1)] == [tokens.id, first.id]
    assert client.datasets.retrieve(first.id) == first
    client.datasets.delete(first)
    with pytest.raises(errors.NotFoundError):
        client.datasets.retrieve(first.id)


def test_upload_errors_are_the_sdk_exceptions(client):
    x, y = points()
    x[2, 2] = np.inf
    with pytest.raises(errors.UnprocessableEntityError) as refused:
        client.datasets.upload(x, y)
    assert refused.value.fields == ["x"] and "non-finite" in str(refused.value)
    with pytest.raises(TypeError, match="y is required"):
        client.datasets.upload(np.ones((3, 2)))
    with pytest.raises(TypeError, match="floats or integers"):
        client.datasets.upload(np.array([["a"], ["b"]]), np.ones(2))
    dataset = client.datasets.upload(*points(1))
    client.jobs.create(
        {"model": {"hidden": [4]}, "data": {"kind": "dataset", "id": dataset.id}, "training": {"max_steps": 2}}
    )
    with pytest.raises(errors.ConflictError):
        client.datasets.delete(dataset.id)


def test_models_from_a_file_bytes_or_a_torch_module(client, tmp_path):
    path = tmp_path / "net.onnx"
    path.write_bytes(mlp_onnx())
    model = client.models.upload(path, name="mlp")
    assert model.parameters == 50 and model.operators == ["Gemm", "Tanh"] and model.name == "mlp"
    assert client.models.upload(mlp_onnx()).id == model.id
    module = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    exported = client.models.upload(module, torch.zeros(1, 3))
    assert exported.parameters == 3 * 5 + 5 + 5 * 2 + 2
    assert exported.inputs[0].shape[0] == "batch" and exported.outputs[0].shape == ["batch", 2]
    assert module.training, "the module's training flag is restored after the export"
    assert [m.id for m in client.models.list()] == [exported.id, model.id]
    client.models.delete(exported.id)
    with pytest.raises(errors.NotFoundError):
        client.models.retrieve(exported.id)


def test_a_module_with_equal_initial_weights_keeps_every_parameter(client):
    """Two freshly made LayerNorms hold equal weights (ones) and biases (zeros); torch's exporter
    merges equal initializers unless they stay graph inputs, which would tie the two layers."""
    module = nn.Sequential(
        nn.Linear(3, 4), nn.LayerNorm(4), nn.Tanh(), nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2)
    )
    exported = client.models.upload(module, torch.zeros(1, 3))
    assert exported.parameters == sum(p.numel() for p in module.parameters())
    assert [i.name for i in exported.inputs] == ["x"]


def test_checkpoints_are_refused_before_anything_is_sent(client, tmp_path):
    for suffix in (".pt", ".pth", ".pt2", ".pkl"):
        checkpoint = tmp_path / f"model{suffix}"
        checkpoint.write_bytes(b"\x80\x04")
        with pytest.raises(ValueError, match="arbitrary code"):
            client.models.upload(checkpoint)
    with pytest.raises(TypeError, match="example_input"):
        client.models.upload(nn.Linear(2, 1))
    with pytest.raises(TypeError, match="torch.nn.Module, an .onnx path or ONNX bytes"):
        client.models.upload(42)


def test_the_dynamo_exporter_when_onnxscript_is_installed():
    pytest.importorskip("onnxscript")
    module = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = export_module(module, torch.zeros(2, 3), dynamo=True)
    import onnx

    assert onnx.load_from_string(data).graph.input[0].type.tensor_type.shape.dim[0].dim_param


def test_an_upload_is_retried_with_the_same_body_and_idempotency_key():
    seen: list[httpx.Request] = []
    x, y = points()

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"title": "down", "status": 503})
        body = {
            "id": "ds_" + "1" * 32,
            "object": "dataset",
            "name": None,
            "points": 10,
            "x": {"shape": [10, 3], "dtype": "float64", "sha256": "a" * 64},
            "y": {"shape": [10, 2], "dtype": "float64", "sha256": "b" * 64},
            "size": 1,
            "created_at": "2025-01-01T00:00:00Z",
        }
        return httpx.Response(201, json=body)

    sdk = Client(
        base_url="http://service", http_client=httpx.Client(transport=httpx.MockTransport(handler)), max_retries=2
    )
    assert sdk.datasets.upload(x, y).id == "ds_" + "1" * 32
    assert len(seen) == 2 and seen[0].content == seen[1].content == npz_bytes_of(seen[0])
    assert seen[0].headers["Idempotency-Key"] == seen[1].headers["Idempotency-Key"]
    assert seen[0].headers["Content-Type"] == "application/octet-stream"


def npz_bytes_of(request: httpx.Request) -> bytes:
    with np.load(io.BytesIO(request.content), allow_pickle=False) as archive:
        assert sorted(archive.files) == ["x", "y"]
    return request.content


def test_the_async_twins(app):
    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with AsyncClient(
            base_url="http://testserver", http_client=httpx.AsyncClient(transport=transport), max_retries=0
        ) as sdk:
            dataset = await sdk.datasets.upload(*points())
            model = await sdk.models.upload(mlp_onnx())
            assert (await sdk.datasets.retrieve(dataset.id)).id == dataset.id
            assert [d.id async for d in sdk.datasets.list()] == [dataset.id]
            assert [m.id async for m in sdk.models.list()] == [model.id]
            assert (await sdk.models.retrieve(model)).parameters == 50
            await sdk.datasets.delete(dataset)
            await sdk.models.delete(model.id)
            with pytest.raises(errors.NotFoundError):
                await sdk.models.retrieve(model.id)

    asyncio.run(scenario())

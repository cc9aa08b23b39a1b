"""The zoo through the product, as a user runs it: each architecture of tests/zoo/architectures.py (Hugging Face
`transformers` tiny configurations and torch.nn modules) is uploaded with `client.models.upload(module, x)` and its
points with `client.datasets.upload`, to a live API + Celery worker on PostgreSQL + Redis, and run as a float64 job.

For each, the upload must be accepted with the module's trainable parameters one for one (names and shapes), and
the job's saved initial kernel must equal a float64 torch.func Jacobian contraction of the user's own module
(tests/zoo/reference.py) to 1e-10 relative (Frobenius); on the three smallest the job's model-Hessian norm must
equal the dense float64 Hessian's largest |λ|.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ntklab.client import Client
from tests.conftest import served
from tests.zoo.architectures import ARCHITECTURES, OUT
from tests.zoo.reference import module_hessian_norm, module_kernel

pytestmark = [pytest.mark.slow, pytest.mark.stack]
pytest.importorskip("transformers")

SMALLEST = ("conv1d_groupnorm", "gru", "vgg_batchnorm")
HESSIAN = {"at": ["init"], "probe_points": 2, "outputs": None, "iterations": 500, "tolerance": 1e-9}


@pytest.fixture(scope="module")
def stack(postgres_redis_stack, tmp_path_factory):
    with served(postgres_redis_stack, tmp_path_factory.mktemp("zoo-logs")) as live:
        yield live


@pytest.fixture(scope="module")
def submitted(stack):
    """Every member uploaded (model and points) and its float64 job submitted before any is awaited: name → (member, model, job)."""
    jobs = {}
    with Client(base_url=stack.url, max_retries=0) as client:
        for name, build in ARCHITECTURES.items():
            member = build()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = client.models.upload(member.module, member.x, name=name)
            y = np.random.default_rng(0).normal(size=(member.x.shape[0], OUT))
            data = client.datasets.upload(member.x, y, name=name)
            spec = {
                "dtype": "float64",
                "seed": 0,
                "model": {"kind": "onnx", "id": model.id},
                "data": {"kind": "dataset", "id": data.id, "probe": {"n": member.x.shape[0]}},
                "training": {"max_steps": 1, "lr": 1e-3, "target_loss": None},
                "diagnostics": {
                    "kernel": {"schedule": "every", "every": 1},
                    "save_kernels": ["init"],
                    "hessian": HESSIAN if name in SMALLEST else None,
                },
            }
            jobs[name] = (member, model, client.jobs.create(spec))
        yield client, jobs


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_the_upload_has_the_modules_parameters_and_the_job_its_exact_kernel(submitted, name):
    client, jobs = submitted
    member, model, job = jobs[name]
    trainable = {n: list(p.shape) for n, p in member.module.named_parameters() if p.requires_grad}
    assert {t.name: t.shape for t in model.trainable} == trainable
    assert model.parameters == sum(p.numel() for p in member.module.parameters() if p.requires_grad)
    done = client.jobs.wait(job.id, timeout=600, progress=False)
    assert done.summary["parameters"] == model.parameters
    K = client.jobs.artifact(job.id, "kernel_init.npy")
    reference = module_kernel(member.module, member.x).numpy()
    assert K.shape == reference.shape == (member.x.shape[0] * OUT,) * 2
    assert np.linalg.norm(K - reference) / np.linalg.norm(reference) < 1e-10
    if name in SMALLEST:
        expected = module_hessian_norm(member.module, member.x[: HESSIAN["probe_points"]])
        assert done.summary["hessian_norm_init"] == pytest.approx(expected, rel=1e-8)

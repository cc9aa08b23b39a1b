"""A client generated from the live API's /openapi.json by openapi-python-client works, warning-free.

The generator runs once per module on the document a running API serves (embedded stack: SQLite and a
filesystem broker, one worker): it must finish with no warning (a schema it cannot read, a response it
leaves out). The generated package is then imported and drives the API as a user of it would: a job
submitted and read back with its typed spec and summary, a sweep created, read and cancelled, a preset
run, a data set uploaded, and a 422 read as a Problem naming the field.

The plot's PNG and SVG are bytes to any client; the generator is told so (`content_type_overrides`),
as its documentation says to for media types it does not know.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import numpy as np
import pytest

from tests.conftest import LiveStack, served
from tests.upload_files import npz

pytestmark = pytest.mark.slow

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "ntklab_generated_client"
CONFIG = """\
package_name_override: ntklab_generated_client
content_type_overrides:
  image/png: application/octet-stream
  image/svg+xml: application/octet-stream
post_hooks: []
"""
TINY = {
    "model": {"hidden": [4]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 2},
    "training": {"max_steps": 2},
}
FINISHED = ("succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def stack(sqlite_stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with served(sqlite_stack, tmp_path_factory.mktemp("generated-client-logs")) as live:
        yield live


@pytest.fixture(scope="module")
def generation(stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """openapi-python-client run on the served document: (its process, the folder holding the package)."""
    root = tmp_path_factory.mktemp("generated")
    document = root / "openapi.json"
    document.write_bytes(stack.client.get("/openapi.json").raise_for_status().content)
    (root / "config.yaml").write_text(CONFIG)
    done = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(document),
            "--config",
            str(root / "config.yaml"),
            "--meta",
            "none",
            "--output-path",
            str(root / PACKAGE),
            "--fail-on-warning",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    return done, root


@pytest.fixture(scope="module")
def api(generation: tuple[subprocess.CompletedProcess, Path]) -> Iterator[ModuleType]:
    """The generated package, imported from its folder."""
    done, root = generation
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def client(api: ModuleType, stack: LiveStack):
    with api.Client(base_url=stack.url, timeout=httpx.Timeout(30.0)) as http:
        yield http


def operation(api: ModuleType, tag: str, name: str) -> ModuleType:
    return importlib.import_module(f"{api.__name__}.api.{tag}.{name}")


def models(api: ModuleType) -> ModuleType:
    return importlib.import_module(f"{api.__name__}.models")


def test_the_generator_reads_the_whole_document_without_a_warning(generation):
    done, root = generation
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "warning" not in output.lower(), output
    assert (root / PACKAGE / "api" / "sweeps" / "create_sweep.py").exists()


def test_a_job_is_submitted_and_read_back_with_its_typed_spec_and_summary(api, client):
    wire = models(api)
    created = operation(api, "jobs", "create_job").sync(client=client, body=wire.JobSpec.from_dict(TINY))
    assert isinstance(created, wire.Job), created
    assert isinstance(created.spec, wire.JobSpec) and created.spec.model.hidden == [4]
    retrieve = operation(api, "jobs", "retrieve_job")
    deadline = time.monotonic() + 120
    job = created
    while job.status not in FINISHED and time.monotonic() < deadline:
        time.sleep(0.2)
        job = retrieve.sync(job.id, client=client)
    assert job.status == "succeeded", job
    assert isinstance(job.summary, wire.JobSummary)
    assert job.summary.steps == 2 and isinstance(job.summary.final_loss, float)
    assert isinstance(job.summary.delta_k_max, float)
    assert job.summary.timings.additional_properties["training"] >= 0


def test_a_sweep_is_created_read_and_cancelled(api, client):
    wire = models(api)
    spec = wire.SweepSpec.from_dict({"name": "generated", "base": TINY, "grid": {"seed": [0, 1, 2]}})
    created = operation(api, "sweeps", "create_sweep").sync(client=client, body=spec)
    assert isinstance(created, wire.Sweep), created
    assert created.total == 3 and created.spec.grid.additional_properties == {"seed": [0, 1, 2]}
    read = operation(api, "sweeps", "retrieve_sweep").sync(created.id, client=client)
    assert isinstance(read, wire.Sweep) and read.id == created.id and len(read.table) == 3
    cancelled = operation(api, "sweeps", "cancel_sweep").sync(created.id, client=client)
    assert isinstance(cancelled, wire.Sweep) and cancelled.cancel_requested


def test_a_preset_runs_as_a_sweep(api, client):
    wire = models(api)
    presets = operation(api, "presets", "list_presets").sync(client=client)
    assert isinstance(presets, wire.PresetList) and presets.data
    name = presets.data[0].name
    sweep = operation(api, "presets", "run_preset").sync(
        name, client=client, body=wire.PresetRun(scale=wire.PresetRunScale.SMOKE)
    )
    assert isinstance(sweep, wire.Sweep), sweep
    assert sweep.total == presets.data[0].jobs.additional_properties["smoke"]
    operation(api, "sweeps", "cancel_sweep").sync(sweep.id, client=client)


def test_a_data_set_is_uploaded(api, client):
    wire = models(api)
    types = importlib.import_module(f"{api.__name__}.types")
    rng = np.random.default_rng(0)
    payload = npz(x=rng.normal(size=(6, 3)), y=rng.normal(size=(6, 1)))
    body = types.File(payload=payload, file_name="points.npz", mime_type="application/octet-stream")
    dataset = operation(api, "datasets", "upload_dataset").sync(client=client, body=body, name="generated")
    assert isinstance(dataset, wire.Dataset), dataset
    assert dataset.name == "generated" and dataset.points == 6


def test_a_422_is_read_as_a_problem_naming_the_field(api, client):
    wire = models(api)
    over_cap = {**TINY, "model": {"hidden": [20_000_000]}}
    answer = operation(api, "jobs", "create_job").sync_detailed(client=client, body=wire.JobSpec.from_dict(over_cap))
    assert answer.status_code == 422
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.parsed
    assert isinstance(problem, wire.Problem), answer.content
    assert problem.status == 422 and "model.hidden.0" in [error.field for error in problem.errors]

"""The three installs from one wheel, each in a fresh virtual environment.

- `pip install ntklab` (no extras) is the client: `import ntklab` loads no torch, SQL,
  FastAPI or Celery, the server commands say which extra to install, and the SDK and the
  CLI drive a running server (create, wait, metrics, an artifact as numpy).
- `ntklab[server,worker]` (torch==2.13.0 installed first, as the Makefile does) serves a
  job to completion with `ntklab up` in an empty folder: the migrations ship in the wheel.

The wheel (tests/packaging/conftest.py) is built once per run from a copy of the working tree; the
environments are made with uv (tests/packaging/wheels.py); torch's wheel is the one pip's configuration picks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ntklab.localstack import clean_env, free_port, wait_until
from tests.packaging.wheels import BIN, fresh_env, run

pytestmark = [pytest.mark.slow]

SERVER_MODULES = ("torch", "sqlalchemy", "fastapi", "celery", "alembic", "uvicorn", "sklearn", "scipy", "matplotlib")
JOB = {
    "seed": 0,
    "model": {"hidden": [16]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4, "probe": {"n": 4}},
    "training": {"max_steps": 20},
    "diagnostics": {"save_kernels": ["init", "final"]},
}


def pinned_torch() -> str:
    """The torch==2.13.0 wheel that the Makefile's `pip install torch==2.13.0` installs here (the CPU build).

    Downloaded once per machine into a cache folder that outlives the run: uv caches a local
    wheel by its path and modification time, so from the second run on the fresh environment
    links torch's 700 MB from uv's cache (about 1 s) instead of unpacking it again (about 8 s).
    """
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ntklab-tests" / "torch-2.13.0"
    if not list(folder.glob("torch-2.13.0*.whl")):
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as partial:  # an interrupted download leaves no wheel behind
            run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "torch==2.13.0", "-d", partial])
            (downloaded,) = Path(partial).glob("torch-2.13.0*.whl")
            downloaded.rename(folder / downloaded.name)
    (torch_wheel,) = folder.glob("torch-2.13.0*.whl")
    return str(torch_wheel)


@pytest.fixture(scope="module")
def client_bin(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_env(tmp_path_factory.mktemp("client-env") / "venv", str(wheel))


@pytest.fixture(scope="module")
def served(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`ntklab up` from the [server,worker] install, started in an empty folder; yields (url, folder)."""
    root = tmp_path_factory.mktemp("server-env")
    server_bin = fresh_env(root / "venv", pinned_torch(), f"{wheel}[server,worker]")
    folder = root / "empty"
    folder.mkdir()
    port = free_port()
    log = root / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen(
            [str(server_bin / "ntklab"), "up", "--port", str(port)],
            cwd=folder,
            env=clean_env({"NTKLAB_QUEUE": f"wheel-{port}"}),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: _answers(url),
            120,
            f"ntklab up (installed from the wheel) never served /healthz; see {log}",
            alive=up,
        )
        yield url, folder
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=60)
    assert up.returncode == 0, log.read_text()[-5000:]


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_the_wheel_ships_the_migrations_and_their_configuration(wheel: Path):
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"ntklab/migrations/alembic.ini", "ntklab/migrations/env.py", "ntklab/migrations/script.py.mako"} <= names
    assert any(name.startswith("ntklab/migrations/versions/0001_") for name in names)


def test_the_wheel_ships_the_dashboard_and_the_api_docs_assets(wheel: Path):
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    static = "ntklab/service/ui/static"
    assert {
        f"{static}/index.html",
        f"{static}/js/main.js",
        f"{static}/js/views/job.js",
        f"{static}/js/views/sweeps.js",
        f"{static}/vendor/echarts/echarts.esm.min.js",
        f"{static}/vendor/echarts/LICENSE",
        f"{static}/vendor/swagger-ui/swagger-ui-bundle.js",
        f"{static}/vendor/redoc/redoc.standalone.js",
    } <= names


def test_the_client_install_imports_no_server_part(client_bin: Path):
    probe = f"import sys, ntklab, ntklab.cli; print(sorted(m for m in {SERVER_MODULES!r} if m in sys.modules))"
    assert run([str(client_bin / "python"), "-c", probe]).stdout.strip() == "[]"
    installed = run([str(BIN / "uv"), "pip", "list", "--python", str(client_bin / "python"), "--format=json"]).stdout
    names = {package["name"].lower() for package in json.loads(installed)}
    assert not names & {"torch", "sqlalchemy", "fastapi", "celery", "scipy", "matplotlib", "psycopg"}, names


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        (["up"], "ntklab[server,worker]"),
        (["migrate"], "ntklab[server]"),
        (["keys", "list"], "ntklab[server]"),
        (["worker"], "ntklab[server,worker]"),
    ],
)
def test_a_server_command_names_the_extra_to_install(client_bin: Path, tmp_path: Path, command: list[str], extra: str):
    done = subprocess.run(
        [str(client_bin / "ntklab"), *command], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    message = " ".join(done.stderr.split())
    assert done.returncode == 2 and f"pip install '{extra}'" in message, done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())


def test_the_server_install_serves_a_job_from_an_empty_folder(served: tuple[str, Path]):
    url, folder = served
    with httpx.Client(base_url=url, timeout=10) as api:
        created = api.post("/v1/jobs", json=JOB)
        assert created.status_code == 202, created.text
        job = created.json()
        deadline = time.monotonic() + 120
        while (current := api.get(f"/v1/jobs/{job['id']}").json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, current
            time.sleep(0.2)
    assert current["status"] == "succeeded", (current["error"], (folder.parent / "up.log").read_text()[-5000:])
    assert current["summary"]["delta_k_max"] > 0
    assert (folder / "var" / "ntklab.db").is_file()


CLIENT_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from ntklab import Client

    spec = json.loads(sys.argv[2])
    with Client(base_url=sys.argv[1]) as client:
        job = client.jobs.wait(client.jobs.create(spec).id, timeout=120)
        series = client.jobs.metrics(job.id, ["loss", "delta_k"])
        kernel = client.jobs.artifact(job.id, "kernel_init.npy")
    assert isinstance(kernel, np.ndarray)
    heavy = [m for m in ("torch", "sqlalchemy", "fastapi", "celery") if m in sys.modules]
    print(json.dumps({"status": job.status, "loss_points": len(series["loss"].step), "kernel_shape": list(kernel.shape),
                      "symmetric": bool(np.allclose(kernel, kernel.T)), "heavy": heavy}))
""")


def test_the_client_install_drives_a_server_through_the_sdk(client_bin: Path, served: tuple[str, Path]):
    url, _ = served
    done = run([str(client_bin / "python"), "-c", CLIENT_SCRIPT, url, json.dumps(JOB)], env=clean_env({}))
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "status": "succeeded",
        "loss_points": report["loss_points"],
        "kernel_shape": [8, 8],
        "symmetric": True,
        "heavy": [],
    }
    assert report["loss_points"] >= 2


def test_the_client_install_drives_a_server_through_the_cli(client_bin: Path, served: tuple[str, Path], tmp_path: Path):
    url, _ = served
    cli = [str(client_bin / "ntklab")]
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(JOB))
    submitted = run([*cli, "submit", str(spec), "--wait", "--url", url], env=clean_env({})).stdout
    job_id = submitted.split("submitted ")[1].split()[0]
    assert "succeeded" in submitted
    csv = run([*cli, "metrics", job_id, "--name", "loss", "--csv", "--url", url], env=clean_env({})).stdout
    assert csv.splitlines()[0] == "name,step,value" and csv.splitlines()[1].startswith("loss,0,")
    run([*cli, "artifact", job_id, "kernel_final.npy", "-o", str(tmp_path / "k.npy"), "--url", url], env=clean_env({}))
    import numpy as np

    assert np.load(tmp_path / "k.npy").shape == (8, 8)  # (n·O)², 4 probe points × 2 outputs

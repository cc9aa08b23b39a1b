"""The SDK against the real service and a real celery worker (tests/conftest.py `live_stack`).

create → wait → metrics → kernel artifact, sync and async; the downloaded kernels are
checked against the summary the worker computed (λ_min, λ_max and ΔK of DESIGN §3),
and the README/docs snippet is run as written.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ntklab import errors
from ntklab.client import AsyncClient, Client

pytestmark = [pytest.mark.slow, pytest.mark.stack]

REPO = Path(__file__).resolve().parents[2]
N_PROBE, OUTPUTS = 8, 2
SPEC = {
    "name": "sdk-live",
    "tags": ["sdk"],
    "seed": 0,
    "model": {"hidden": [64]},
    "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4, "classes": 2, "probe": {"n": N_PROBE}},
    "training": {"max_steps": 40, "target_loss": None, "lr": 0.1},
    "diagnostics": {
        "kernel": {"schedule": "every", "every": 10},
        "hessian": {"at": ["init"], "top_k": 1, "probe_points": 1, "iterations": 8},
        "save_kernels": ["init", "final"],
    },
}


def url(stack) -> str:
    return f"http://127.0.0.1:{stack.port}"


def check_finished_job(job, metrics, K0, K1) -> None:
    """The arrays the SDK returns agree with the scalars the worker stored."""
    assert job.status == "succeeded" and job.attempts == 1
    assert job.progress.step == job.progress.total == 40
    summary = job.summary
    assert all(not isinstance(v, float) or math.isfinite(v) for v in summary.values())
    assert K0.shape == K1.shape == (N_PROBE * OUTPUTS, N_PROBE * OUTPUTS)
    eig0 = np.linalg.eigvalsh(K0)
    assert summary["kernel_lambda_min_init"] == pytest.approx(eig0[0], rel=1e-4, abs=1e-6)
    assert summary["kernel_cond_init"] == pytest.approx(eig0[-1] / eig0[0], rel=1e-3)
    delta = np.linalg.norm(K1 - K0) / np.linalg.norm(K0)
    assert summary["delta_k_final"] == pytest.approx(delta, rel=1e-4)
    steps, values = metrics["delta_k"]
    assert steps.tolist() == [0, 10, 20, 30, 40]
    assert values[0] == 0 and values[-1] == pytest.approx(delta, rel=1e-4)
    assert metrics["loss"].step[0] == 0 and np.all(np.isfinite(metrics["loss"].value))


def test_sync_create_wait_metrics_kernel(live_stack):
    with Client(base_url=url(live_stack)) as client:
        created = client.jobs.create(SPEC)
        assert created.status in ("queued", "running")
        job = client.jobs.wait(created.id, timeout=180, poll_interval=0.2)
        metrics = client.jobs.metrics(job, ["delta_k", "loss"])
        K0 = client.jobs.artifact(job, "kernel_init.npy")
        K1 = client.jobs.artifact(job, "kernel_final.npy")
        names = {info.name for info in client.jobs.artifacts(job)}
        assert client.jobs.artifact(job, "hessian.json")["init"]
        listed = [j.id for j in client.jobs.list(tag="sdk", limit=1)]
        finished = [j.id for j in client.jobs.list(status=["succeeded", "failed"], tag="sdk")]
        queued = [j.id for j in client.jobs.list(status="queued", tag="sdk")]
    check_finished_job(job, metrics, K0, K1)
    assert {"kernel_init.npy", "kernel_final.npy", "hessian.json"} <= names
    assert created.id in listed and created.id in finished and created.id not in queued


def test_async_create_wait_metrics_kernel(live_stack):
    async def scenario():
        async with AsyncClient(base_url=url(live_stack)) as client:
            created = await client.jobs.create(SPEC, name="sdk-live-async")
            job = await client.jobs.wait(created.id, timeout=180, poll_interval=0.2)
            metrics = await client.jobs.metrics(job.id, ["delta_k", "loss"])
            K0 = await client.jobs.artifact(job.id, "kernel_init.npy")
            K1 = await client.jobs.artifact(job.id, "kernel_final.npy")
            listed = [j.id async for j in client.jobs.list(tag="sdk", limit=1)]
            return created, job, metrics, K0, K1, listed

    created, job, metrics, K0, K1, listed = asyncio.run(scenario())
    check_finished_job(job, metrics, K0, K1)
    assert job.name == "sdk-live-async" and created.id in listed


def test_service_errors_arrive_as_sdk_exceptions(live_stack):
    with Client(base_url=url(live_stack), max_retries=0) as client:
        with pytest.raises(errors.UnprocessableEntityError) as invalid:
            client.jobs.create(SPEC, model={"hidden": [0]})
        with pytest.raises(errors.NotFoundError):
            client.jobs.retrieve("job_does_not_exist")
        first = client.jobs.create(SPEC, idempotency_key="sdk-live-key")
        again = client.jobs.create(SPEC, idempotency_key="sdk-live-key")
        client.jobs.wait(first, timeout=180, poll_interval=0.2, progress=False)
        client.jobs.delete(first)
        with pytest.raises(errors.NotFoundError):
            client.jobs.retrieve(first.id)
    assert "model.hidden.0" in invalid.value.fields
    assert first.id == again.id


def snippet(path: Path) -> str:
    """The Python code between <!-- sdk-snippet --> and <!-- /sdk-snippet -->, without its fence."""
    block = re.search(r"<!-- sdk-snippet -->\s*```python\n(.*?)```\s*<!-- /sdk-snippet -->", path.read_text(), re.S)
    assert block, f"{path} has no sdk-snippet block"
    return block.group(1)


def test_readme_and_docs_carry_the_same_snippet():
    assert snippet(REPO / "README.md") == snippet(REPO / "docs" / "sdk.md")


def test_readme_snippet_runs_as_written(live_stack):
    code = snippet(REPO / "README.md")
    assert len(code.strip().splitlines()) <= 12
    env = {**os.environ, "NTKLAB_URL": url(live_stack)}
    env.pop("NTKLAB_API_KEY", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    converged, delta_k_max, hessian_norm, shape = done.stdout.split(" ", 3)
    assert converged == "True", "the README's job reaches target_loss (issue #15: the paper's set-up converges)"
    assert 0 < float(delta_k_max) < 0.05, "a wide net with a linear head: the kernel barely moves"
    assert float(hessian_norm) > 0
    assert shape.strip() == "(32, 32)"


def test_sweep_table_fits_and_plots(live_stack, tmp_path):
    base = {**SPEC, "diagnostics": {**SPEC["diagnostics"], "hessian": None, "save_kernels": []}}
    with Client(base_url=url(live_stack)) as client:
        created = client.sweeps.create(
            {
                "name": "sdk-sweep",
                "base": base,
                "grid": {"model.hidden.0": [16, 64, 256]},
                "fits": [{"y": "delta_k_max", "x": "model.hidden.0"}],
            }
        )
        sweep = client.sweeps.wait(created.id, timeout=300, poll_interval=0.5)
        rows = client.sweeps.table(sweep.id)
        fits = client.sweeps.fits(sweep.id)
        image = client.sweeps.plot_image(sweep.id, x="model.hidden.0", y="delta_k_max", format="svg")
        presets = {preset.name for preset in client.presets.list()}
    assert created.total == 3 and sweep.status == "succeeded"
    assert sorted(row["model.hidden.0"] for row in rows) == [16, 64, 256]
    (fit,) = fits
    xs = np.log([row["model.hidden.0"] for row in rows])
    ys = np.log([row["delta_k_max"] for row in rows])
    assert fit["slope"] == pytest.approx(np.polyfit(xs, ys, 1)[0], rel=1e-9)
    figure = sweep.plot("model.hidden.0", "delta_k_max", path=str(tmp_path / "sweep.png"))
    r_squared = f", R² {fit['r_squared']:.2f}" if fit["r_squared"] is not None else ""
    assert figure.axes[0].get_legend_handles_labels()[1] == [
        f"ΔK: slope {fit['slope']:+.2f} ± {fit['slope_high'] - fit['slope']:.2f}{r_squared}"
    ]
    assert (fit["x_label"], fit["y_label"], fit["group_label"], fit["theory_slope"]) == ("width m", "ΔK", "all", None)
    assert b"<svg" in image[:500]
    assert {"fig1-width", "fig2-bottleneck", "table1-hessian"} <= presets


def test_cli_submit_quickstart_wait_prints_the_summary(live_stack):
    env = {**os.environ, "NTKLAB_URL": url(live_stack)}
    env.pop("NTKLAB_API_KEY", None)
    command = [str(Path(sys.executable).parent / "ntklab"), "submit", "examples/quickstart.json", "--wait"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "succeeded" in done.stdout
    for name in ("delta_k_max", "hessian_norm_init", "final_loss", "weight_change_linf"):
        assert name in done.stdout
    assert done.stderr == ""


def test_cli_exit_codes_against_the_service(live_stack, tmp_path):
    env = {**os.environ, "NTKLAB_URL": url(live_stack)}
    ntklab = str(Path(sys.executable).parent / "ntklab")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  hidden: [0]\n")
    refused = subprocess.run(
        [ntklab, "submit", str(bad)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    missing = subprocess.run(
        [ntklab, "status", "job_nope"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2 and "model.hidden.0" in refused.stderr
    assert missing.returncode == 2 and "404" in missing.stderr

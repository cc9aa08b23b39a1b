"""Every `ntklab` command scripts: piped through `cat` (stdout is not a terminal), `--json` prints
exactly one JSON document on stdout, and the tables for people keep every id whole on one line.

Against the real service and worker (tests/conftest.py `live_stack`), through the installed
console script, as a shell script would call it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ntklab.client import Client
from ntklab.localstack import clean_env

pytestmark = [pytest.mark.slow, pytest.mark.stack]

REPO = Path(__file__).resolve().parents[2]
NTKLAB = str(Path(sys.executable).parent / "ntklab")
TAG = "cli-json"
SPEC_YAML = f"""
name: cli-json
tags: [{TAG}]
model: {{hidden: [32], output_activation: swish}}
data: {{kind: gaussian_mixture, n_train: 8, input_dim: 4, probe: {{n: 4}}}}
training: {{max_steps: 20, target_loss: null, lr: 0.1}}
diagnostics:
  kernel: {{schedule: every, every: 10}}
  hessian: {{at: [init], top_k: 1, probe_points: 1, iterations: 4}}
  save_kernels: [init]
"""
LONG_YAML = SPEC_YAML.replace("name: cli-json", "name: cli-json-long").replace("max_steps: 20", "max_steps: 100000")
SHORT_OF_TARGET_YAML = SPEC_YAML.replace("target_loss: null", "target_loss: 1.0e-12")
BAD_YAML = "model: {activation: relux, hidden: [0]}\n"
SWEEP_YAML = f"""
name: cli-json-sweep
tags: [{TAG}]
base: {{model: {{hidden: [8]}}, data: {{kind: gaussian_mixture, n_train: 8, input_dim: 4, probe: {{n: 4}}}},
        training: {{max_steps: 5, target_loss: null, lr: 0.1}}, diagnostics: {{hessian: null}}}}
grid: {{model.hidden.0: [8, 16, 32]}}
fits: [{{y: delta_k_max, x: model.hidden.0}}]
"""
JOB_ID = re.compile(r"job_[0-9a-f]{32}")


class Cli:
    """`ntklab ARGS | cat` in bash with pipefail: the exit code is ntklab's, stdout went through a pipe."""

    def __init__(self, url: str, folder: Path) -> None:
        self.env = {**os.environ, "NTKLAB_URL": url, "COLUMNS": "40"}
        self.env.pop("NTKLAB_API_KEY", None)
        self.folder = folder

    def __call__(self, *args: str, code: int = 0, env: dict | None = None) -> subprocess.CompletedProcess:
        line = f"set -o pipefail; {shlex.join([NTKLAB, *args])} | cat"
        done = subprocess.run(
            ["bash", "-c", line], cwd=self.folder, env=env or self.env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == code, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def json(self, *args: str, code: int = 0, env: dict | None = None):
        """The one JSON document `args --json` printed (json.loads refuses anything more or less)."""
        return json.loads(self(*args, "--json", code=code, env=env).stdout)


@pytest.fixture
def cli(live_stack, tmp_path):
    (tmp_path / "spec.yaml").write_text(SPEC_YAML)
    (tmp_path / "long.yaml").write_text(LONG_YAML)
    (tmp_path / "bad.yaml").write_text(BAD_YAML)
    (tmp_path / "short.yaml").write_text(SHORT_OF_TARGET_YAML)
    (tmp_path / "sweep.yaml").write_text(SWEEP_YAML)
    return Cli(f"http://127.0.0.1:{live_stack.port}", tmp_path)


def test_job_commands_print_one_json_document(cli, tmp_path):
    job = cli.json("submit", "spec.yaml", "--wait")
    assert job["status"] == "succeeded" and job["object"] == "job" and job["summary"]["steps"] == 20
    job_id = job["id"]
    assert cli.json("status", job_id)["summary"] == job["summary"]
    assert cli.json("wait", job_id)["status"] == "succeeded"
    series = cli.json("metrics", job_id, "-n", "delta_k", "-n", "loss")
    assert set(series) == {"delta_k", "loss"} and series["delta_k"]["step"] == [0, 10, 20]
    assert series["delta_k"]["value"][-1] == pytest.approx(job["summary"]["delta_k_final"], rel=1e-6)
    wrote = cli.json("artifact", job_id, "kernel_init.npy", "-o", "K0.npy")
    kernel = np.load(tmp_path / "K0.npy")
    assert wrote["bytes"] == (tmp_path / "K0.npy").stat().st_size and kernel.shape[0] == kernel.shape[1] >= 4
    assert job_id in [listed["id"] for listed in cli.json("list", "--tag", TAG)]
    ran = cli.json("run", "spec.yaml")
    assert ran["status"] == "succeeded" and ran["id"] != job_id


def test_a_cancelled_job_says_cancelled(cli):
    job = cli.json("submit", "long.yaml")
    assert job["status"] in ("queued", "running")
    cancelled = cli.json("cancel", job["id"])
    assert cancelled["id"] == job["id"] and cancelled["cancel_requested"]
    waited = cli("wait", job["id"], "--json", code=1)
    assert json.loads(waited.stdout)["status"] == "cancelled"
    assert f"job {job['id']} cancelled" in waited.stderr and "no error recorded" not in waited.stderr
    human = cli("status", job["id"])
    assert re.search(r"status\s*[│|┃]\s*cancelled", human.stdout)


def test_sweep_and_preset_commands_print_one_json_document(cli, tmp_path):
    sweep = cli.json("sweep", "sweep.yaml", "--wait")
    assert sweep["status"] == "succeeded" and sweep["total"] == 3
    assert sweep["id"] in [s["id"] for s in cli.json("sweeps", "list", "--tag", TAG)]
    assert [s["id"] for s in cli.json("sweeps", "list", "--tag", TAG, "--status", "succeeded", "--limit", "1")] == [
        sweep["id"]
    ]
    assert cli.json("sweeps", "show", sweep["id"])["fits"][0]["x"] == "model.hidden.0"
    rows = cli.json("sweeps", "table", sweep["id"])
    assert sorted(row["model.hidden.0"] for row in rows) == [8, 16, 32] and all("delta_k_max" in row for row in rows)
    plot = cli.json("sweeps", "plot", sweep["id"], "-o", "fit.svg")
    assert plot["format"] == "svg" and b"<svg" in (tmp_path / "fit.svg").read_bytes()[:500]
    names = [preset["name"] for preset in cli.json("presets")]
    assert "fig1-width" in names
    started = cli.json("preset", "param-check", "--scale", "smoke")
    with Client(base_url=cli.env["NTKLAB_URL"]) as client:
        client.sweeps.cancel(started["id"])
    assert started["object"] == "sweep" and started["tags"] == ["preset", "param-check"]


def test_status_shows_the_jobs_warnings(cli):
    job = cli.json("submit", "short.yaml", "--wait")
    assert "target_loss_not_reached" in [warning["code"] for warning in job["warnings"]]
    human = cli("status", job["id"]).stdout
    assert re.search(r"warning\s*[│|┃]\s*target_loss_not_reached: ", human)


def test_people_see_whole_ids_and_each_field_once_through_a_pipe(cli):
    """COLUMNS=40: a terminal that narrow would wrap a 36-character id; a pipe never does."""
    job = cli.json("submit", "spec.yaml", "--wait")
    status = cli("status", job["id"]).stdout
    assert job["id"] in status
    fields = [found[1] for line in status.splitlines() if (found := re.match(r"[│|┃]\s*(\S+)\s+[│|┃]", line))]
    named_once = [field for field in fields if field != "warning"]  # a job may carry several warnings
    assert len(named_once) == len(set(named_once)) and {"id", "status", "device"} <= set(named_once)
    listed = cli("list", "--tag", TAG).stdout
    assert job["id"] in JOB_ID.findall(listed)
    preset = cli("preset", "param-check", "--scale", "smoke").stdout
    (sweep_id,) = re.findall(r"swp_[0-9a-f]{32}", preset.split("follow it with")[0])
    assert f"ntklab sweeps show {sweep_id}" in preset
    with Client(base_url=cli.env["NTKLAB_URL"]) as client:
        client.sweeps.cancel(sweep_id)
    assert sweep_id in cli("sweeps", "list").stdout
    assert sweep_id in cli("sweeps", "show", sweep_id).stdout


def test_bad_specs_name_each_field_once_without_union_noise(cli):
    remote = cli("submit", "bad.yaml", "--json", code=2)
    local = cli("run", "bad.yaml", "--local", "--json", code=2)
    for done in (remote, local):
        error = json.loads(done.stdout)["error"]
        assert error["exit_code"] == 2
        assert sorted(e["field"] for e in error["errors"]) == ["model.activation", "model.hidden.0"]
        assert "valid list" not in done.stdout + done.stderr
        assert done.stderr.count("model.activation") == 1 and done.stderr.count("model.hidden.0") == 1
    human = cli("run", "bad.yaml", "--local", code=2)
    assert human.stdout == "" and human.stderr.count("model.activation:") == 1


def test_run_local_reads_yaml_as_submit_does(cli, tmp_path):
    result = cli.json("run", "spec.yaml", "--local", "--out", "out")
    assert result["out"] == "out" and result["summary"]["steps"] == 20
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written == result["summary"]
    assert result["warnings"] == json.loads((tmp_path / "out" / "warnings.json").read_text())


def test_server_commands_print_one_json_document(cli, tmp_path):
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    env = clean_env({"NTKLAB_DATABASE_URL": url})
    assert cli.json("migrate", env=env) == {"revision": "head", "upgraded": True}
    made = cli.json("keys", "create", "robot", env=env)
    assert made["name"] == "robot" and made["secret"] and not made["admin"]
    (listed,) = cli.json("keys", "list", env=env)
    assert listed["id"] == made["id"] and "secret" not in listed
    assert cli.json("keys", "revoke", made["id"], env=env) == {"id": made["id"], "revoked": True}
    again = cli("keys", "revoke", made["id"], "--json", code=1, env=env)
    assert json.loads(again.stdout) == {"id": made["id"], "revoked": False}

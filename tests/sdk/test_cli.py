"""`ntklab` service commands against the flaky look-alike server: output and exit codes.

Exit codes: 0 done, 1 the job failed, 2 usage error (bad arguments, a refused spec),
3 the service is unreachable.
"""

from __future__ import annotations

import json
import socket

import numpy as np
from typer.testing import CliRunner

from ntklab.cli import app

from .test_client import SPEC, TOTAL_STEPS, FlakyService, service  # noqa: F401

runner = CliRunner()


def invoke(service: FlakyService, *args: str):
    return runner.invoke(app, [*args, "--url", service.url])


def spec_file(tmp_path, spec: dict) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


def test_submit_wait_prints_the_summary_and_exits_0(service, tmp_path):
    result = invoke(service, "submit", spec_file(tmp_path, SPEC), "--wait")
    assert result.exit_code == 0, result.output
    assert "succeeded" in result.output and "delta_k_max" in result.output and "0.1" in result.output


def test_run_without_local_submits_to_the_service(service, tmp_path):
    result = runner.invoke(app, ["run", spec_file(tmp_path, SPEC)], env={"NTKLAB_URL": service.url})
    assert result.exit_code == 0, result.output
    assert list(service.jobs) == ["job_1"] and "succeeded" in result.output


def test_a_failed_job_exits_1(service, tmp_path):
    result = invoke(service, "submit", spec_file(tmp_path, SPEC | {"name": "doomed"}), "--wait")
    assert result.exit_code == 1
    assert "diverged badly" in result.output


def test_a_refused_spec_exits_2_naming_the_field(service, tmp_path):
    result = invoke(service, "submit", spec_file(tmp_path, {"model": {"hidden": [0]}}))
    assert result.exit_code == 2
    assert "model.hidden.0" in result.output
    assert service.jobs == {}


def test_a_missing_spec_file_and_a_bad_option_exit_2(service, tmp_path):
    assert invoke(service, "submit", str(tmp_path / "absent.json")).exit_code == 2
    assert invoke(service, "list", "--limit", "0").exit_code == 2


def test_an_unreachable_service_exits_3(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = runner.invoke(app, ["status", "job_1", "--url", f"http://127.0.0.1:{port}"])
    assert result.exit_code == 3
    assert "unreachable" in result.output


def test_status_wait_cancel_and_list(service, tmp_path):
    assert invoke(service, "submit", spec_file(tmp_path, SPEC)).exit_code == 0
    status = invoke(service, "status", "job_1")
    assert status.exit_code == 0 and "job_1" in status.output and f"/{TOTAL_STEPS}" in status.output
    assert invoke(service, "wait", "job_1").exit_code == 0
    assert invoke(service, "submit", spec_file(tmp_path, SPEC)).exit_code == 0
    cancelled = invoke(service, "cancel", "job_2")
    assert cancelled.exit_code == 0 and "cancelled" in cancelled.output
    assert invoke(service, "wait", "job_2").exit_code == 1
    listed = invoke(service, "list", "--limit", "5")
    assert listed.exit_code == 0 and "job_1" in listed.output and "job_2" in listed.output


def test_metrics_csv_round_trips(service):
    result = invoke(service, "metrics", "job_1", "--csv")
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "name,step,value"
    assert "loss,1,0.5" in lines and "loss,2," in lines and "delta_k,2,0.1" in lines


def test_artifact_writes_the_bytes(service, tmp_path):
    target = tmp_path / "k.npy"
    result = invoke(service, "artifact", "job_1", "kernel_init.npy", "-o", str(target))
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.load(target), np.arange(6.0).reshape(2, 3))

"""POST /v1/jobs?dry_run=true's by_worker_class on both backends: the estimate calibrated per worker class from
that class's succeeded jobs, arranged as a worker writes them (claimed on a device, finished with timings), and
checked against the median of the ratios arranged."""

from __future__ import annotations

from statistics import median

import pytest

from ntklab.service.estimates import CALIBRATION_WINDOW
from ntklab.store.job_store import JobStore

SPEC = {
    "data": {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 8, "classes": 3},
    "model": {"hidden": [128]},
    "training": {"max_steps": 300},
    "diagnostics": {"hessian": {}, "linearization_error": True},
}
ASKED = {**SPEC, "model": {"hidden": [256]}, "training": {"max_steps": 1000}}


def _finish(app, client, device: str, ratio: dict[str, float], *, steps: int = 300, spec: dict = SPEC) -> dict:
    """Submit `spec`, claim it on `device` and finish it with timings = ratio × the job's estimated seconds
    (training: per step run, over `steps` of max_steps). Returns the job's estimated seconds per term."""
    job = client.post("/v1/jobs", json=spec).json()
    estimated = client.get(f"/v1/jobs/{job['id']}").json()["estimate"]["time"]
    max_steps = spec["training"]["max_steps"]
    timings = {"data": 0.01, "build": 0.02, "storage": 0.5}
    phases = {"kernel": "kernel", "linearization": "path", "warnings": "kernel_trace", "hessian": "hessian"}
    timings |= {phase: ratio.get(term, 1.0) * estimated[term] for phase, term in phases.items()}
    timings["training"] = ratio["training"] * estimated["training"] / max_steps * steps
    store = JobStore(app.state.sessions)
    claim = store.claim(job["id"], worker="w0", device=device)
    summary = {"steps": steps, "outcome": "max_steps" if steps == max_steps else "converged", "timings": timings}
    store.finish(claim, "succeeded", summary=summary)
    return estimated


def _asked(client) -> dict:
    answer = client.post("/v1/jobs?dry_run=true", json=ASKED)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_no_finished_job_is_an_empty_calibration_that_says_so(client, app):
    client.post("/v1/jobs", json=SPEC)  # queued, not finished: no throughput measured
    answer = _asked(client)
    assert answer["by_worker_class"] == {}
    assert answer["calibration"].startswith("no succeeded job yet")


def test_each_phase_is_the_median_ratio_times_the_estimate(client, app):
    arranged = [
        {"training": 0.5, "kernel": 4.0, "path": 1.5, "kernel_trace": 0.2},
        {"training": 2.0, "kernel": 1.0, "path": 3.0, "kernel_trace": 0.4},
        {"training": 3.0, "kernel": 2.0, "path": 2.0, "kernel_trace": 0.1},
    ]
    for ratio in arranged:
        _finish(app, client, "cpu", ratio)
    answer = _asked(client)
    assert set(answer["by_worker_class"]) == {"cpu"}
    cpu = answer["by_worker_class"]["cpu"]
    assert cpu["worker_class"] == "cpu" and cpu["devices"] == ["cpu"] and cpu["jobs"] == 3
    phases = {phase["name"]: phase for phase in cpu["phases"]}
    assert set(phases) == set(answer["time"])
    for term in ("training", "kernel", "path", "kernel_trace"):
        factor = median(ratio[term] for ratio in arranged)
        assert phases[term]["factor"] == pytest.approx(factor, rel=1e-3), term  # timings are rounded by nobody here
        assert phases[term]["seconds"] == pytest.approx(factor * answer["time"][term], rel=1e-3)
        assert phases[term]["jobs"] == 3
    constants = phases["constants"]
    assert constants["factor"] is not None and constants["jobs"] == 3  # data + build measured
    for term in ("hessian", "hessian_spectrum", "loss_hessian"):
        assert phases[term]["factor"] is None and phases[term]["seconds"] == answer["time"][term]
    assert "tolerance" in phases["hessian"]["note"]
    assert phases["sensitivity"]["factor"] is None and phases["sensitivity"]["note"].startswith("no recent job")
    assert cpu["seconds"] == pytest.approx(sum(phase["seconds"] for phase in cpu["phases"]))
    assert [phase["seconds"] for phase in cpu["phases"]] == sorted((p["seconds"] for p in cpu["phases"]), reverse=True)
    assert answer["seconds"] == pytest.approx(sum(answer["time"].values())), "the estimate at the rates is unchanged"


def test_an_early_stopped_job_counts_per_step_for_training_and_not_along_the_path(client, app):
    _finish(app, client, "cpu", {"training": 1.0, "kernel": 1.0})
    _finish(app, client, "cpu", {"training": 2.0, "kernel": 1.0})
    # stopped at step 30 of 300: its per-step pace is 3x the estimate's, its kernel ran a few of the scheduled
    # passes (here 100x the estimate's, which would move the median): training counts it, kernel does not
    _finish(app, client, "cpu", {"training": 3.0, "kernel": 100.0}, steps=30)
    phases = {phase["name"]: phase for phase in _asked(client)["by_worker_class"]["cpu"]["phases"]}
    assert phases["training"]["factor"] == pytest.approx(2.0) and phases["training"]["jobs"] == 3
    assert phases["kernel"]["factor"] == pytest.approx(1.0) and phases["kernel"]["jobs"] == 2
    assert phases["kernel_trace"]["jobs"] == 3, "a phase that does not follow the steps counts every job"


def test_a_class_is_its_devices_before_the_index_and_none_leaks_into_another(client, app):
    _finish(app, client, "cpu", {"training": 1.0})
    _finish(app, client, "cuda:0", {"training": 0.01})
    _finish(app, client, "cuda:1", {"training": 0.03})
    _finish(app, client, "cuda", {"training": 0.02})
    by_class = _asked(client)["by_worker_class"]
    assert set(by_class) == {"cpu", "cuda"}
    assert by_class["cuda"]["devices"] == ["cuda", "cuda:0", "cuda:1"] and by_class["cuda"]["jobs"] == 3
    training = {
        name: next(p for p in estimate["phases"] if p["name"] == "training") for name, estimate in by_class.items()
    }
    assert training["cpu"]["factor"] == pytest.approx(1.0) and training["cpu"]["jobs"] == 1
    assert training["cuda"]["factor"] == pytest.approx(0.02) and training["cuda"]["jobs"] == 3


def test_the_window_is_the_newest_jobs_of_the_class(client, app, monkeypatch):
    monkeypatch.setattr("ntklab.service.estimates.CALIBRATION_WINDOW", 2)
    assert CALIBRATION_WINDOW == 50
    for factor in (9.0, 1.0, 2.0):  # the oldest (9.0) falls out of a window of 2
        _finish(app, client, "cpu", {"training": factor})
    cpu = _asked(client)["by_worker_class"]["cpu"]
    training = next(p for p in cpu["phases"] if p["name"] == "training")
    assert cpu["jobs"] == 2 and training["factor"] == pytest.approx(1.5)

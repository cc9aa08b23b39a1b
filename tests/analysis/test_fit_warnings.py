"""A fit carries the warnings of the sweep points it was fitted on (analysis/fit_warnings.py, sweep_table.py)."""

from __future__ import annotations

from ntklab.analysis.sweep_table import SweepRow, fit_results, table
from ntklab.api_schemas.sweeps import FitSpec

NOT_REACHED = {
    "code": "target_loss_not_reached",
    "message": "training stopped at max_steps (step 300) …",
    "values": {"outcome": "max_steps"},
}
HESSIAN = {"code": "hessian_not_converged", "message": "1 of 4 Hessian values at init …", "values": {"when": "init"}}


def row(job_id: str, width: int, head: str, warnings: list[dict], status: str = "succeeded") -> SweepRow:
    spec = {"model": {"hidden": [width], "output_activation": head}}
    return SweepRow(job_id, status, {}, spec, {"delta_k_max": 1.0 / width}, warnings)


def test_each_group_carries_its_own_points_warnings_once_per_code():
    rows = [
        row("a", 10, "identity", [NOT_REACHED]),
        row("b", 100, "identity", [NOT_REACHED, HESSIAN, {**HESSIAN, "values": {"when": "final"}}]),
        row("c", 10, "swish", []),
        row("d", 100, "swish", []),
        row("e", 1000, "identity", [NOT_REACHED], status="failed"),  # not fitted, so not carried
    ]
    fits = fit_results(rows, FitSpec(y="delta_k_max", x="model.hidden.0", group_by=["model.output_activation"]))
    by_head = {fit.group["model.output_activation"]: fit for fit in fits}
    assert by_head["swish"].warnings == []
    reached, hessian = by_head["identity"].warnings
    assert reached.code == "target_loss_not_reached" and reached.values == {"points": 2, "of": 2, "job_ids": ["a", "b"]}
    assert reached.message == "2 of 2 points: training stopped at max_steps (step 300) …"
    assert hessian.code == "hessian_not_converged" and hessian.values == {"points": 1, "of": 2, "job_ids": ["b"]}


def test_the_table_takes_the_warnings_from_the_jobs_own_column():
    class Job:
        id, status, spec = "j", "succeeded", {"model": {"hidden": [4]}}
        summary = {"delta_k_max": 0.5}
        warnings = [NOT_REACHED]

    (only,) = table({"grid": {"model.hidden.0": [4]}}, [Job()])
    assert only.summary == {"delta_k_max": 0.5} and only.warnings == [NOT_REACHED]

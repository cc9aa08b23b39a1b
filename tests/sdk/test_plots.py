"""job.plot() and sweep.plot(): figures that carry the data and the fitted slope, saved as PNG/SVG."""

from __future__ import annotations

import numpy as np
import pytest

from ntklab.plots import sweep_fits
from ntklab.resources.jobs import Job, MetricSeries
from ntklab.resources.sweeps import Sweep


def _job() -> Job:
    now = "2025-01-01T12:00:00Z"
    return Job.model_validate({
        "id": "job_1", "name": "demo", "status": "succeeded", "tags": [], "sweep_id": None, "parameters": 1,
        "attempts": 1, "device": "cpu", "cancel_requested": False,
        "progress": {"step": 3, "total": 3, "phase": "succeeded"}, "summary": {}, "error": None,
        "created_at": now, "enqueued_at": now, "started_at": now, "finished_at": now, "spec": None,
    })


def test_job_plot_draws_three_panels_and_saves(tmp_path):
    steps = np.array([0, 1, 10, 100])
    metrics = {
        "delta_k": MetricSeries(steps, np.array([0.0, 0.01, 0.05, 0.08])),
        "loss": MetricSeries(steps, np.array([1.0, 0.5, 0.1, 0.001])),
        "weight_change_l2": MetricSeries(steps, np.array([0.0, 0.1, 0.3, 0.4])),
        "weight_change_linf": MetricSeries(steps, np.array([0.0, 0.01, 0.02, 0.03])),
    }
    figure = _job().plot(str(tmp_path / "job.png"), metrics=metrics)
    loss_panel = figure.axes[1]
    np.testing.assert_array_equal(loss_panel.lines[0].get_ydata(), metrics["loss"].value)
    assert loss_panel.get_yscale() == "log"
    assert len(figure.axes[2].lines) == 2
    assert (tmp_path / "job.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unbound_job_needs_metrics():
    with pytest.raises(TypeError, match="metrics="):
        _job().plot()


def _sweep(slopes: dict[str, float]) -> Sweep:
    rows = []
    for head, slope in slopes.items():
        for width in (10, 100, 1000):
            for seed, noise in ((0, 0.9), (1, 1.1)):
                rows.append({"job_id": f"job_{head}_{width}_{seed}", "status": "succeeded",
                             "values": {"model.hidden.0": width, "model.output_activation": head, "seed": seed},
                             "summary": {"delta_k_max": 2.0 * width**slope * noise}})
    rows.append({"job_id": "job_failed", "status": "failed", "values": {"model.hidden.0": 5}, "summary": {}})
    fits = [{"x": "model.hidden.0", "y": "delta_k_max", "group_by": ["model.output_activation"]}]
    return Sweep.model_validate({
        "id": "swp_1", "name": "width", "tags": [], "status": "partial", "counts": {"succeeded": len(rows) - 1, "failed": 1},
        "total": len(rows), "cancel_requested": False, "created_at": "2025-01-01T12:00:00Z", "spec": {},
        "table": rows, "fits": fits,
    })


def test_sweep_fits_average_seeds_per_group_skip_unfinished_and_recover_the_power_law():
    fits = sweep_fits(_sweep({"identity": -0.5}).table, x="model.hidden.0", y="delta_k_max",
                      group_by=["model.output_activation"])
    (group, fit), = fits.items()
    assert group == (("model.output_activation", "identity"),)
    xs = np.array([point.x for point in fit.points])
    np.testing.assert_allclose(xs, [10, 100, 1000])
    np.testing.assert_allclose([point.y_mean for point in fit.points], 2.0 * xs**-0.5)
    assert fit.slope == pytest.approx(-0.5, abs=1e-12) and np.exp(fit.intercept) == pytest.approx(2.0)


def test_sweep_plot_has_one_line_per_group_with_its_slope(tmp_path):
    figure = _sweep({"identity": -0.5, "swish": 0.1}).plot("model.hidden.0", "delta_k_max", path=str(tmp_path / "s.svg"))
    labels = sorted(figure.axes[0].get_legend_handles_labels()[1])
    assert labels == ["output_activation=identity: slope -0.50", "output_activation=swish: slope +0.10"]
    assert figure.axes[0].get_xscale() == "log" and figure.axes[0].get_yscale() == "log"
    assert b"<svg" in (tmp_path / "s.svg").read_bytes()[:500]

"""job.plot() and sweep.plot(): figures that carry the data, and the service's fits exactly as returned, saved as PNG/SVG."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ntklab.resources.jobs import Job, MetricSeries
from ntklab.resources.sweeps import Sweep

REPO = Path(__file__).resolve().parents[2]


def _job() -> Job:
    now = "2025-01-01T12:00:00Z"
    return Job.model_validate(
        {
            "id": "job_1",
            "name": "demo",
            "status": "succeeded",
            "tags": [],
            "sweep_id": None,
            "parameters": 1,
            "attempts": 1,
            "device": "cpu",
            "cancel_requested": False,
            "progress": {"step": 3, "total": 3, "phase": "succeeded"},
            "summary": {},
            "error": None,
            "created_at": now,
            "enqueued_at": now,
            "started_at": now,
            "finished_at": now,
            "spec": None,
        }
    )


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


def test_job_plot_shows_delta_k_of_the_logits_beside_the_outputs_for_a_nonlinear_head_with_a_title():
    steps = np.array([0, 1, 10, 100])
    outputs, logits = np.array([0.0, 0.2, 0.6, 0.9]), np.array([0.0, 0.001, 0.004, 0.006])
    metrics = {
        "delta_k": MetricSeries(steps, outputs),
        "delta_k_logits": MetricSeries(steps, logits),
        "loss": MetricSeries(steps, np.array([1.0, 0.5, 0.1, 0.001])),
    }
    figure = _job().plot(metrics=metrics)
    kernel_panel = figure.axes[0]
    lines = {line.get_label(): line.get_ydata() for line in kernel_panel.lines}
    assert sorted(lines) == ["ΔK(t) of the logits f", "ΔK(t) of the outputs φ(f)"]
    np.testing.assert_array_equal(lines["ΔK(t) of the outputs φ(f)"], outputs)
    np.testing.assert_array_equal(lines["ΔK(t) of the logits f"], logits)
    assert [text.get_text() for text in kernel_panel.get_legend().get_texts()] == list(lines)
    assert figure.get_suptitle() == "demo"
    assert [axes.get_xlabel() for axes in figure.axes] == ["step"] * 3
    assert [axes.get_ylabel() for axes in figure.axes] == ["ΔK(t)", "loss", "‖w_t − w₀‖"]


def test_job_plot_draws_lines_and_takes_log_axes_where_the_data_span_decades():
    """1,181 recorded steps are one line per series, no markers; the loss spans 5 decades (log), ΔK and ‖w−w₀‖ one
    (linear, their zeros at step 0 drawn); steps 1…1180 span 3 decades (symlog), 0…50 do not (linear)."""
    steps = np.arange(1181)
    metrics = {
        "delta_k": MetricSeries(steps, 0.5 * (1 - np.exp(-steps / 10))),
        "loss": MetricSeries(steps, np.exp(-steps / 100)),
        "weight_change_l2": MetricSeries(steps, 1e-2 * np.sqrt(steps)),
    }
    figure = _job().plot(metrics=metrics)
    lines = [line for axes in figure.axes for line in axes.lines]
    assert len(lines) == 3 and all(line.get_marker() == "None" and line.get_linestyle() == "-" for line in lines)
    assert [axes.get_xscale() for axes in figure.axes] == ["symlog"] * 3
    assert [axes.get_yscale() for axes in figure.axes] == ["linear", "log", "linear"]
    short = _job().plot(
        metrics={name: MetricSeries(series.step[:51], series.value[:51]) for name, series in metrics.items()}
    )
    assert [axes.get_xscale() for axes in short.axes] == ["linear"] * 3


def test_a_png_is_saved_with_a_pdf_and_an_svg_beside_it(tmp_path):
    steps = np.array([0, 1, 10])
    _job().plot(str(tmp_path / "job.png"), metrics={"loss": MetricSeries(steps, np.array([1.0, 0.5, 0.1]))})
    _sweep(FITS).plot(path=str(tmp_path / "sweep.png"))
    for stem in ("job", "sweep"):
        assert (tmp_path / f"{stem}.pdf").read_bytes()[:5] == b"%PDF-"
        assert b"<svg" in (tmp_path / f"{stem}.svg").read_bytes()[:500]
    _job().plot(str(tmp_path / "only.svg"), metrics={"loss": MetricSeries(steps, np.array([1.0, 0.5, 0.1]))})
    assert sorted(path.name for path in tmp_path.iterdir() if path.stem == "only") == ["only.svg"]


def test_a_preset_sweeps_figure_is_titled_in_words_another_sweep_by_its_name():
    preset = _sweep(FITS).model_copy(update={"name": "fig1-width (cpu)", "tags": ["preset", "fig1-width"]})
    assert preset.plot().get_suptitle() == "Figure 1 (left): ΔK vs width, linear vs softmax vs swish head (cpu scale)"
    assert _sweep(FITS).plot().get_suptitle() == "width"


def test_unbound_job_needs_metrics():
    with pytest.raises(TypeError, match="metrics="):
        _job().plot()


def _fit(y: str, group_by: list[str], group: dict, slope: float, intercept: float, points: list) -> dict:
    """A fit as the service returns it in the sweep resource (a FitResult's JSON)."""
    return {
        "y": y,
        "x": "model.hidden.0",
        "group_by": group_by,
        "group": group,
        "slope": slope,
        "slope_low": slope - 0.05,
        "slope_high": slope + 0.05,
        "intercept": intercept,
        "r_squared": 0.97,
        "points": [{"x": x, "y_mean": mean, "y_std": std, "runs": 2} for x, mean, std in points],
        "verdict": f"{group or 'all'}: {y} ∝ x^{slope:+.2f}",
    }


# The service's fits: deliberately not what the table rows below would give (their slope is -0.5,
# widths 10/100/1000), so a figure that re-fitted the rows would show other lines and points.
FITS = [
    _fit(
        "delta_k_max",
        ["model.output_activation"],
        {"model.output_activation": "identity"},
        -0.3,
        0.4,
        [(16.0, 0.63, 0.05), (64.0, 0.41, 0.02), (256.0, 0.2, 0.01)],
    ),
    _fit(
        "delta_k_max",
        ["model.output_activation"],
        {"model.output_activation": "swish"},
        0.12,
        -1.1,
        [(16.0, 0.45, 0.04), (256.0, 0.6, 0.03)],
    ),
    _fit("final_loss", [], {}, -1.0, 2.0, [(16.0, 0.5, 0.1), (256.0, 0.03, 0.01)]),
]


def _sweep(fits: list[dict]) -> Sweep:
    rows = []
    for head in ("identity", "swish"):
        for width in (10, 100, 1000):
            for seed, noise in ((0, 0.9), (1, 1.1)):
                rows.append(
                    {
                        "job_id": f"job_{head}_{width}_{seed}",
                        "status": "succeeded",
                        "values": {"model.hidden.0": width, "model.output_activation": head, "seed": seed},
                        "summary": {"delta_k_max": 2.0 * width**-0.5 * noise, "final_loss": 0.1},
                    }
                )
    return Sweep.model_validate(
        {
            "id": "swp_1",
            "name": "width",
            "tags": [],
            "status": "succeeded",
            "counts": {"succeeded": len(rows)},
            "total": len(rows),
            "cancel_requested": False,
            "created_at": "2025-01-01T12:00:00Z",
            "spec": {},
            "table": rows,
            "fits": fits,
        }
    )


def _drawn(axes) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per legend label of a fitted (solid) line: the line's (x, y) and the (x, mean) of the error-bar points in its colour."""
    drawn = {}
    for line in axes.lines:
        if not line.get_label().startswith("_") and line.get_linestyle() == "-":
            (bars,) = [c for c in axes.containers if c.lines[0].get_color() == line.get_color()]
            drawn[line.get_label()] = (line.get_xydata(), bars.lines[0].get_xydata())
    return drawn


def test_sweep_plot_draws_the_services_fits_of_the_first_x_one_panel_per_y_not_a_refit_of_the_rows(tmp_path):
    figure = _sweep(FITS).plot(path=str(tmp_path / "s.svg"))
    axes, loss_axes = figure.axes
    assert list(_drawn(loss_axes)) == ["final loss: slope -1.00 ± 0.05, R² 0.97"]
    drawn = _drawn(axes)
    legends = {"linear head: slope -0.30 ± 0.05, R² 0.97": FITS[0], "swish head: slope +0.12 ± 0.05, R² 0.97": FITS[1]}
    assert sorted(drawn) == sorted(legends)
    for label, fit in legends.items():
        line, points = drawn[label]
        slope, intercept = np.polyfit(np.log(line[:, 0]), np.log(line[:, 1]), 1)
        assert slope == pytest.approx(fit["slope"], abs=1e-12) and intercept == pytest.approx(
            fit["intercept"], abs=1e-12
        )
        np.testing.assert_allclose(points, [(p["x"], p["y_mean"]) for p in fit["points"]])
    assert (axes.get_xlabel(), axes.get_ylabel(), figure.get_suptitle()) == ("width m", "ΔK", "width")
    assert axes.get_xscale() == "log" and axes.get_yscale() == "log"
    assert b"<svg" in (tmp_path / "s.svg").read_bytes()[:500]


def test_sweep_plot_picks_the_fit_of_the_pair_asked_for():
    drawn = _drawn(_sweep(FITS).plot("model.hidden.0", "final_loss").axes[0])
    ((line, points),) = drawn.values()
    assert list(drawn) == ["final loss: slope -1.00 ± 0.05, R² 0.97"]
    assert np.polyfit(np.log(line[:, 0]), np.log(line[:, 1]), 1)[0] == pytest.approx(-1.0)
    np.testing.assert_allclose(points, [(16.0, 0.5), (256.0, 0.03)])


def test_a_pair_without_a_fit_is_refused_naming_the_fits_there_are():
    named = "no fit of delta_k_max against seed (its fits: delta_k_max against model.hidden.0, final_loss against"
    with pytest.raises(ValueError, match=re.escape(named)):
        _sweep(FITS).plot("seed", "delta_k_max")
    with pytest.raises(ValueError, match="its fits: none"):
        _sweep([]).plot()


def test_fits_from_a_newer_service_with_more_keys_are_drawn():
    fits = [{**fit, "method": "ols"} for fit in FITS]
    assert sorted(_drawn(_sweep(fits).plot(y="delta_k_max").axes[0])) == [
        "linear head: slope -0.30 ± 0.05, R² 0.97",
        "swish head: slope +0.12 ± 0.05, R² 0.97",
    ]


def test_importing_the_sdk_loads_no_matplotlib_scipy_or_torch_and_plotting_needs_no_scipy():
    code = (
        "import sys\n"
        "import ntklab, ntklab.plots, ntklab.resources.sweeps\n"
        "heavy = ('matplotlib', 'scipy', 'torch', 'ntklab.analysis.fits')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "from tests.sdk.test_plots import FITS, _sweep\n"
        "_sweep(FITS).plot()\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "['matplotlib']"]

"""run() with diagnostics.hessian_spectrum and diagnostics.loss_hessian: series, summary, artifact, progress.

Every number the run reports is recomputed here on a network rebuilt from the spec (at w₀) or
reloaded from weights_final.npz (at the end), by the engine functions called directly.
"""

import json

import pytest
import torch

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.artifacts import load_weights
from ntklab.engine.callbacks import NullCallbacks
from ntklab.engine.curvature.hessian_spectrum import hessian_spectrum
from ntklab.engine.curvature.loss_hessian import loss_hessian_split
from ntklab.engine.nets.network import build_network
from ntklab.engine.run import run
from ntklab.engine.training.data import load_data

SERIES = ("loss_hessian_norm", "gauss_newton_norm", "loss_hessian_rest_norm", "loss_kernel_lambda_min")


def job(of: str, head: str = "swish") -> JobSpec:
    return JobSpec.model_validate(
        {
            "seed": 2,
            "data": {
                "kind": "gaussian_mixture",
                "n_train": 10,
                "input_dim": 4,
                "classes": 2,
                "mean_scale": 0.5,
                "sigma": 0.5,
            },
            "model": {"hidden": [16], "activation": "tanh", "output_activation": head},
            "training": {"max_steps": 30, "target_loss": None},
            "diagnostics": {
                "kernel": {"points": 4},
                "hessian": None,
                "layer_sensitivity": False,
                "hessian_spectrum": {"of": of, "points": 2, "probes": 6, "lanczos_steps": 8, "grid": 50, "bins": 10},
                "loss_hessian": {"iterations": 12},
            },
            "device": "cpu",
            "dtype": "float64",
        }
    )


class Phases(NullCallbacks):
    def __init__(self) -> None:
        self.seen = []

    def progress(self, progress) -> None:
        self.seen.append(progress)


@pytest.mark.parametrize("of", ["loss", "model"])
def test_a_run_reports_the_spectrum_at_init_and_end_and_the_split_on_the_kernel_schedule(of):
    spec = job(of)
    phases = Phases()
    result = run(spec, phases)
    data = load_data(spec, dtype=torch.float64)
    net = build_network(spec.model, data.input_shape, seed=spec.seed, dtype=torch.float64)
    wanted = spec.diagnostics.hessian_spectrum

    def direct():
        return hessian_spectrum(
            net, wanted, x_probe=data.x_probe, x_train=data.x_train, y_train=data.y_train, loss="mse"
        )

    at_init = direct()
    split_init = loss_hessian_split(net, data.x_train, data.y_train, "mse", iterations=12)
    load_weights(net, result.artifacts["weights_final.npz"].data)
    at_end = direct()

    summary = result.summary
    assert summary["hessian_spectrum_trace_init"] == pytest.approx(at_init.trace, rel=1e-10)
    assert summary["hessian_spectrum_trace_se_init"] == pytest.approx(at_init.trace_se, rel=1e-10)
    assert summary["hessian_spectrum_trace_final"] == pytest.approx(at_end.trace, rel=1e-10)
    assert summary["hessian_spectrum_trace_init"] != pytest.approx(summary["hessian_spectrum_trace_final"], rel=1e-6)
    report = json.loads(result.artifacts["hessian_spectrum.json"].data)
    assert set(report) == {"init", "final"}
    assert report["final"]["of"] == of
    assert [len(row) for row in report["init"]["spectra"]] == ([1] if of == "loss" else [2, 2])
    first = report["init"]["spectra"][0][0]
    assert first["nodes"] == at_init.spectra[0][0].nodes
    assert first["block_norms"] == pytest.approx(at_init.spectra[0][0].block_norms, rel=1e-10)
    assert set(first["density"]) == {"grid", "values", "sigma"} and len(first["histogram"]["mass"]) == 10

    kernel_steps = result.series["delta_k"].steps
    for name in SERIES:
        assert result.series[name].steps == kernel_steps
    assert result.series["loss_hessian_norm"].values[0] == pytest.approx(split_init.norm, rel=1e-10)
    assert result.series["gauss_newton_norm"].values[0] == pytest.approx(split_init.gauss_newton_norm, rel=1e-10)
    assert result.series["loss_hessian_rest_norm"].values[0] == pytest.approx(split_init.rest_norm, rel=1e-10)
    assert result.series["loss_kernel_lambda_min"].values[0] == pytest.approx(split_init.kernel_lambda_min, rel=1e-8)

    spectrum_progress = [p for p in phases.seen if p.phase == "hessian_spectrum"]
    assert spectrum_progress[-1].step == spectrum_progress[-1].total > 0
    assert "hessian_spectrum" in summary["timings"] and "loss_hessian" in summary["timings"]


def test_without_the_new_diagnostics_the_summary_and_artifacts_do_not_mention_them():
    spec = job("loss").model_copy(
        update={
            "diagnostics": job("loss").diagnostics.model_copy(update={"hessian_spectrum": None, "loss_hessian": None})
        }
    )
    result = run(spec)
    assert not any(name.startswith("hessian_spectrum") for name in result.summary)
    assert "hessian_spectrum.json" not in result.artifacts
    assert not set(SERIES) & set(result.series)

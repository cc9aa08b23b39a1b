"""run(): the summary, series and artifacts of one job, end to end on the CPU."""

import io
import json
import math

import numpy as np
import pytest
import torch

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.artifacts import load_weights
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network
from ntklab.engine.run import run
from ntklab.engine.training.data import load_data

SUMMARY = [
    "final_loss",
    "steps",
    "converged",
    "outcome",
    "delta_k_max",
    "delta_k_final",
    "kernel_lambda_min_init",
    "kernel_lambda_min_final",
    "kernel_lambda_max_init",
    "kernel_lambda_max_final",
    "kernel_cond_init",
    "kernel_cond_final",
    "hessian_norm_init",
    "hessian_norm_final",
    "grad_norm_init",
    "hessian_grad_ratio_init",
    "hessian_kernel_ratio_init",
    "weight_change_l2",
    "weight_change_linf",
    "linearization_error_final",
    "wall_time_s",
    "lr",
    "parameters",
]


def job(head="identity", **overrides) -> JobSpec:
    spec = {
        "seed": 1,
        "data": {
            "kind": "gaussian_mixture",
            "n_train": 12,
            "input_dim": 5,
            "classes": 2,
            "mean_scale": 0.5,
            "sigma": 0.5,
        },
        "model": {"hidden": [24], "activation": "tanh", "output_activation": head},
        "training": {"max_steps": 60, "target_loss": None},
        "diagnostics": {"kernel": {"points": 6}, "hessian": {"probe_points": 2, "iterations": 16}},
        "device": "cpu",
    }
    for key, value in overrides.items():
        spec[key] = {**spec[key], **value}
    return JobSpec.model_validate(spec)


class Recording:
    def __init__(self):
        self.metrics, self.phases = [], []

    def progress(self, progress):
        self.phases.append(progress.phase)

    def metric(self, name, step, value):
        self.metrics.append((name, step, value))

    def cancelled(self):
        return False


@pytest.fixture(scope="module")
def swish_run():
    callbacks = Recording()
    return run(job("swish"), callbacks), callbacks


def test_summary_has_every_name_and_finite_numbers(swish_run):
    result, _ = swish_run
    s = result.summary
    for name in [*SUMMARY, "device", "dtype", "kernel_method", "delta_k_max_logits", "delta_k_final_logits"]:
        assert name in s, name
    for name in SUMMARY:
        if name not in ("converged", "outcome"):
            assert isinstance(s[name], (int, float)) and math.isfinite(s[name]), name
    assert s["outcome"] == "max_steps" and s["steps"] == 60 and s["converged"] is False
    assert (s["device"], s["dtype"], s["kernel_method"]) == ("cpu", "float32", "structured")
    assert s["parameters"] == sum(p.numel() for p in build_network(job("swish").model, (5,), seed=1).parameters())
    assert s["delta_k_max"] >= s["delta_k_final"] > 0 and s["delta_k_max_logits"] > 0


def test_everything_is_strict_json(swish_run):
    result, _ = swish_run
    json.dumps(result.summary, allow_nan=False)
    json.dumps({k: [v.steps, v.values] for k, v in result.series.items()}, allow_nan=False)
    for name in ("hessian.json", "layer_sensitivity.json"):
        json.loads(result.artifacts[name].data)


def test_series_follow_the_schedule_and_stream_to_callbacks(swish_run):
    result, callbacks = swish_run
    assert result.series["loss"].steps == list(range(61))
    assert result.series["delta_k"].steps == [0, 1, 2, 5, 12, 26, 60]
    assert result.series["delta_k"].values[0] == 0.0 and result.series["delta_k_logits"].values[0] == 0.0
    assert result.series["linearization_error"].steps == [1, 2, 5, 12, 26, 60]
    streamed = {(n, s, v) for n, s, v in callbacks.metrics}
    recorded = {(n, s, v) for n, series in result.series.items() for s, v in zip(series.steps, series.values)}
    assert streamed == recorded and len(callbacks.metrics) == len(recorded)
    assert callbacks.phases[:3] == ["data", "build", "kernel"] and callbacks.phases[-1] == "storage"
    assert callbacks.phases.count("train") == 61


def test_kernel_artifacts_are_float64_square_nO(swish_run):
    result, _ = swish_run
    for name in ("kernel_init.npy", "kernel_final.npy", "kernel_logits_init.npy", "kernel_logits_final.npy"):
        K = np.load(io.BytesIO(result.artifacts[name].data))
        assert K.shape == (24, 24) and K.dtype == np.float64
        np.testing.assert_allclose(K, K.T, rtol=1e-5, atol=1e-6)
    K0 = np.load(io.BytesIO(result.artifacts["kernel_init.npy"].data))
    assert result.summary["grad_norm_init"] == pytest.approx(math.sqrt(K0.diagonal().max()), rel=1e-6)


def test_reloaded_final_weights_reproduce_the_final_outputs_exactly(swish_run):
    result, _ = swish_run
    spec = job("swish")
    data = load_data(spec)
    net = build_network(spec.model, data.input_shape, seed=12345)
    load_weights(net, result.artifacts["weights_final.npz"].data)
    with torch.no_grad():
        outputs = net.outputs(data.x_probe).double().numpy()
    np.testing.assert_array_equal(outputs, np.load(io.BytesIO(result.artifacts["outputs_final.npy"].data)))
    with np.load(io.BytesIO(result.artifacts["weights_init.npz"].data)) as init:
        fresh = build_network(spec.model, data.input_shape, seed=1)
        for name, p in fresh.named_parameters():
            np.testing.assert_array_equal(init[name], p.detach().numpy())


def test_weight_change_matches_the_weight_files(swish_run):
    result, _ = swish_run
    with (
        np.load(io.BytesIO(result.artifacts["weights_init.npz"].data)) as w0,
        np.load(io.BytesIO(result.artifacts["weights_final.npz"].data)) as w1,
    ):
        delta = np.concatenate([(w1[k].astype(np.float64) - w0[k]).ravel() for k in w0.files])
    assert result.summary["weight_change_l2"] == pytest.approx(np.linalg.norm(delta), rel=1e-5)
    assert result.summary["weight_change_linf"] == pytest.approx(np.abs(delta).max(), rel=1e-5)


def test_frozen_readout_is_saved_but_not_counted():
    result = run(job(model={"train_output_layer": False}, training={"max_steps": 5}))
    with np.load(io.BytesIO(result.artifacts["weights_final.npz"].data)) as w:
        assert "readout.weight" in w.files
    assert result.summary["parameters"] == 24 * 5 + 24


def test_linearization_error_is_zero_for_a_model_linear_in_its_weights():
    spec = job(
        model={"activation": "identity", "train_output_layer": False},
        training={"max_steps": 30, "lr": 0.3},
    )
    result = run(spec.model_copy(update={"dtype": "float64"}))
    errors = [v for v in result.series["linearization_error"].values]
    assert len(errors) == 6 and max(errors) < 1e-12
    assert result.summary["delta_k_max"] < 1e-12


def test_divergence_is_an_outcome_with_earlier_points_kept():
    result = run(job(training={"lr": 1e6, "max_steps": 500}))
    s = result.summary
    assert s["outcome"] == "diverged" and s["converged"] is False
    assert 0 < s["diverged_step"] == s["steps"] < 500
    assert s["final_loss"] is None and s["hessian_norm_final"] is None
    assert result.series["loss"].steps == list(range(s["steps"]))
    assert "kernel_final.npy" not in result.artifacts and "kernel_init.npy" in result.artifacts
    json.dumps(s, allow_nan=False)


def test_converged_run_and_float64():
    result = run(job(training={"max_steps": 5000, "target_loss": 1e-2}).model_copy(update={"dtype": "float64"}))
    s = result.summary
    assert s["outcome"] == "converged" and s["converged"] is True and s["final_loss"] <= 1e-2
    assert result.series["loss"].steps[-1] == s["steps"] == result.series["delta_k"].steps[-1]


def test_cli_run_local_writes_summary_metrics_and_artifacts(tmp_path):
    from typer.testing import CliRunner

    from ntklab.cli import app

    spec_path = tmp_path / "spec.json"
    spec_path.write_text(job(training={"max_steps": 10}).model_dump_json())
    result = CliRunner().invoke(app, ["run", str(spec_path), "--local", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert summary["steps"] == 10 and metrics["loss"]["step"] == list(range(11))
    assert np.load(tmp_path / "out" / "kernel_init.npy").shape == (24, 24)


def test_cli_bad_spec_exits_2_naming_the_field(tmp_path):
    from typer.testing import CliRunner

    from ntklab.cli import app

    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({"model": {"hidden": [0]}}))
    result = CliRunner().invoke(app, ["run", str(spec_path), "--local", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "model.hidden.0" in result.output
    assert not (tmp_path / "out").exists()


def test_cli_failed_run_exits_1(tmp_path):
    from typer.testing import CliRunner

    from ntklab.cli import app

    spec_path = tmp_path / "spec.json"
    too_wide_a_filter = {"kind": "cnn", "hidden": [4], "kernel_size": 15, "padding": 0}
    spec_path.write_text(
        json.dumps({"data": {"kind": "builtin", "name": "digits", "n_train": 16}, "model": too_wide_a_filter})
    )
    result = CliRunner().invoke(app, ["run", str(spec_path), "--local", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "model.kernel_size" in result.output


def test_hessian_ratios_match_dense_hessians_and_gradients():
    """hessian_norm_init, hessian_grad_ratio_init and hessian_kernel_ratio_init against dense float64 references."""
    spec = job(
        "swish",
        training={"max_steps": 0},
        diagnostics={"hessian": {"probe_points": 2, "outputs": None, "iterations": 60, "tolerance": 1e-6}},
    )
    spec = spec.model_copy(update={"dtype": "float64"})
    summary = run(spec).summary
    data = load_data(spec, dtype=torch.float64)
    net = build_network(spec.model, data.input_shape, seed=spec.seed, dtype=torch.float64)
    trainable = {name: p.detach() for name, p in net.named_parameters() if p.requires_grad}
    sizes = [p.numel() for p in trainable.values()]
    flat = torch.cat([p.reshape(-1) for p in trainable.values()])

    def output(w, x, a):
        params = {n: c.reshape(p.shape) for (n, p), c in zip(trainable.items(), torch.split(w, sizes))}
        return apply_head(net.head, torch.func.functional_call(net, params, (x,)))[0, a]

    norms, grad_ratios, kernel_ratios = [], [], []
    for i in range(2):
        for a in range(spec.model.output_dim):
            f = lambda w: output(w, data.x_probe[i : i + 1], a)  # noqa: E731
            h = torch.linalg.eigvalsh(torch.func.hessian(f)(flat)).abs().max().item()
            g = torch.func.grad(f)(flat).norm().item()
            norms.append(h), grad_ratios.append(h / g), kernel_ratios.append(h / g**2)
    assert summary["hessian_norm_init"] == pytest.approx(max(norms), rel=1e-6)
    assert summary["hessian_grad_ratio_init"] == pytest.approx(max(grad_ratios), rel=1e-6)
    assert summary["hessian_kernel_ratio_init"] == pytest.approx(max(kernel_ratios), rel=1e-6)

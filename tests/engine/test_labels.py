"""Integer class labels y [n] train with cross-entropy exactly as torch's own cross_entropy does (issue 26, item 1).

An uploaded data set whose y is integers in one column (sklearn's form) reaches the engine as labels c [n]
(int64). The loss curve of a run on them is checked against an independent loop that steps a copy of
the network by hand on torch.nn.functional.cross_entropy(logits, c) in float64, and every target-reading
diagnostic (the loss Hessian split, the loss Hessian spectrum) against the same run on one-hot y [n, C].
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.callbacks import NullCallbacks
from ntklab.engine.nets.network import build_network, trainable_parameters
from ntklab.engine.run import run
from ntklab.engine.training.data import load_data
from ntklab.engine.training.loop import loss_function, train
from ntklab.engine.uploads import Uploads

N, D, C, LR, STEPS = 24, 5, 4, 0.3, 25


def arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    labels = rng.permutation(np.arange(N) % C)
    return rng.normal(size=(C, D))[labels] + 0.5 * rng.normal(size=(N, D)), labels


def spec(y: np.ndarray, **diagnostics) -> JobSpec:
    """A job on the data set "ds_0…0" holding y, with `stored` as the service fills it in."""
    labels = y.ndim == 1
    stored = {
        "points": N,
        "x_shape": [D],
        "x_integer": False,
        "y_width": 1 if labels else C,
        "y_integer": labels,
        "y_min": int(y.min()) if labels else None,
        "y_max": int(y.max()) if labels else None,
    }
    return JobSpec.model_validate(
        {
            "seed": 2,
            "dtype": "float64",
            "device": "cpu",
            "data": {"kind": "dataset", "id": "ds_" + "0" * 32, "stored": stored, "probe": {"n": 6}},
            "model": {"hidden": [16], "activation": "tanh"},
            "training": {"loss": "cross_entropy", "lr": LR, "max_steps": STEPS, "target_loss": None},
            "diagnostics": {
                "kernel": {"points": 4},
                "hessian": None,
                "save_kernels": [],
                "save_weights": False,
                **diagnostics,
            },
        }
    )


def uploads(y: np.ndarray) -> Uploads:
    return Uploads(datasets={"ds_" + "0" * 32: (arrays()[0], y)})


def test_labels_reach_the_engine_as_int64_and_set_the_class_count():
    _, labels = arrays()
    job = spec(labels.astype(np.int32))
    assert job.model.output_dim == C, "the output width defaults to y_max + 1 classes"
    data = load_data(job, uploads=uploads(labels.astype(np.int32)), dtype=torch.float64)
    assert data.y_train.dtype == torch.int64 and data.y_train.shape == (N,)
    assert torch.equal(data.y_train, torch.as_tensor(labels))


def test_the_loss_curve_is_torch_cross_entropy_on_the_labels():
    x, labels = arrays()
    job = spec(labels)
    data = load_data(job, uploads=uploads(labels), dtype=torch.float64)
    net = build_network(job.model, data.input_shape, seed=0, dtype=torch.float64)
    twin = copy.deepcopy(net)
    curve: list[float] = []
    train(
        net, data, job.training, lr=LR, seed=0, callbacks=NullCallbacks(), observe=lambda s, loss, f: curve.append(loss)
    )

    inputs, targets = torch.as_tensor(x), torch.as_tensor(labels)
    weights = list(trainable_parameters(twin).values())
    expected = []
    for _ in range(STEPS + 1):
        loss = F.cross_entropy(twin(inputs), targets)
        expected.append(loss.item())
        gradients = torch.autograd.grad(loss, weights)
        with torch.no_grad():
            for weight, gradient in zip(weights, gradients):
                weight -= LR * gradient
    assert len(curve) == STEPS + 1 and curve[-1] < 0.8 * curve[0]
    np.testing.assert_allclose(curve, expected, rtol=1e-12, atol=0)


def test_the_gradient_is_that_of_torch_cross_entropy():
    x, labels = arrays()
    job = spec(labels)
    data = load_data(job, uploads=uploads(labels), dtype=torch.float64)
    net = build_network(job.model, data.input_shape, seed=0, dtype=torch.float64)
    weights = list(trainable_parameters(net).values())
    ours = torch.autograd.grad(loss_function("cross_entropy", net)(data.x_train, data.y_train), weights)
    theirs = torch.autograd.grad(F.cross_entropy(net(torch.as_tensor(x)), torch.as_tensor(labels)), weights)
    for mine, reference in zip(ours, theirs):
        torch.testing.assert_close(mine, reference, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    "diagnostics",
    [
        {"loss_hessian": {"iterations": 12}},
        {"hessian_spectrum": {"of": "loss", "probes": 2, "lanczos_steps": 6, "at": ["final"]}},
    ],
    ids=["loss_hessian", "hessian_spectrum"],
)
def test_the_target_reading_diagnostics_equal_those_of_one_hot_targets(diagnostics):
    _, labels = arrays()
    one_hot = np.eye(C)[labels]
    on_labels = run(spec(labels, **diagnostics), uploads=uploads(labels))
    on_rows = run(spec(one_hot, **diagnostics), uploads=uploads(one_hot))
    numbers = {name for name, value in on_rows.summary.items() if isinstance(value, float) and "time" not in name}
    assert {"final_loss", "delta_k_max"} <= numbers and set(on_labels.series) == set(on_rows.series)
    assert {"loss_hessian_norm", "gauss_newton_norm", "loss_hessian_rest_norm"} <= set(
        on_rows.series
    ) or "hessian_spectrum_trace_final" in numbers
    for name in numbers:
        assert on_labels.summary[name] == pytest.approx(on_rows.summary[name], rel=1e-9, abs=1e-12), name
    for name, series in on_rows.series.items():
        assert on_labels.series[name].steps == series.steps
        assert on_labels.series[name].values == pytest.approx(series.values, rel=1e-9, abs=1e-12), name
    spectrum = "hessian_spectrum.json"
    if spectrum in on_rows.artifacts:
        assert on_labels.artifacts[spectrum].data == on_rows.artifacts[spectrum].data


def test_labels_past_the_outputs_are_refused_by_the_loader():
    _, labels = arrays()
    job = spec(labels).model_copy(update={"model": spec(labels).model.model_copy(update={"output_dim": C - 1})})
    with pytest.raises(ValueError, match=r"labels in \[0, 3\)"):
        load_data(job, uploads=uploads(labels))

"""Training loop: every optimizer learns, divergence is an outcome, the loop stops when told."""

import math

import pytest
import torch

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.callbacks import JobCancelled, NullCallbacks
from ntklab.engine.kernels.ntk import kernel_spectrum, tangent_kernel
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network
from ntklab.engine.training.data import load_data
from ntklab.engine.training.loop import auto_lr, loss_function, train


def setup(optimizer="gd", lr=0.5, **training):
    spec = JobSpec.model_validate(
        {
            "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4},
            "model": {"hidden": [32], "activation": "tanh"},
            "training": {"optimizer": optimizer, "lr": lr, "batch_size": 4, **training},
        }
    )
    data = load_data(spec)
    return spec, data, build_network(spec.model, data.input_shape, seed=0)


class Log:
    def __init__(self):
        self.points: list[tuple[int, float]] = []

    def __call__(self, step, loss, final):
        self.points.append((step, loss))


@pytest.mark.parametrize("optimizer, lr", [("gd", 0.5), ("sgd", 0.2), ("momentum", 0.05), ("adam", 0.01)])
def test_each_optimizer_decreases_the_loss(optimizer, lr):
    spec, data, net = setup(optimizer, lr, max_steps=100, target_loss=None)
    log = Log()
    outcome = train(net, data, spec.training, lr=lr, seed=0, callbacks=NullCallbacks(), observe=log)
    assert outcome.outcome == "max_steps" and outcome.steps == 100
    assert [s for s, _ in log.points] == list(range(101))
    assert log.points[-1][1] < 0.5 * log.points[0][1]


def test_recorded_loss_is_the_full_training_loss_at_w_t():
    spec, data, net = setup("sgd", 0.2, max_steps=5, target_loss=None)
    log = Log()
    train(net, data, spec.training, lr=0.2, seed=0, callbacks=NullCallbacks(), observe=log)
    with torch.no_grad():
        expected = 0.5 * (net.outputs(data.x_train) - data.y_train).pow(2).sum() / len(data.x_train)
    assert log.points[-1][1] == pytest.approx(expected.item(), rel=1e-6)


def test_huge_lr_diverges_with_the_step_and_keeps_what_came_before():
    spec, data, net = setup("gd", 1e6, max_steps=1000, target_loss=None)
    log = Log()
    outcome = train(net, data, spec.training, lr=1e6, seed=0, callbacks=NullCallbacks(), observe=log)
    assert outcome.outcome == "diverged" and outcome.diverged_step == outcome.steps
    assert 0 < outcome.steps < 1000 and not math.isfinite(outcome.final_loss)
    assert [s for s, _ in log.points] == list(range(outcome.steps))
    assert all(math.isfinite(v) for _, v in log.points)


def test_target_loss_stops_early():
    spec, data, net = setup("gd", 0.5, max_steps=10_000, target_loss=0.05)
    log = Log()
    outcome = train(net, data, spec.training, lr=0.5, seed=0, callbacks=NullCallbacks(), observe=log)
    assert outcome.outcome == "converged" and outcome.steps < 10_000
    assert outcome.final_loss <= 0.05 < log.points[-2][1]


class CancelAfter(NullCallbacks):
    def __init__(self, asks):
        self.asks, self.steps = asks, []

    def cancelled(self):
        self.asks -= 1
        return self.asks < 0

    def progress(self, progress):
        self.steps.append(progress.step)


def test_cancellation_raises_within_one_step():
    spec, data, net = setup("gd", 0.5, max_steps=1000, target_loss=None)
    callbacks, log = CancelAfter(asks=7), Log()
    with pytest.raises(JobCancelled):
        train(net, data, spec.training, lr=0.5, seed=0, callbacks=callbacks, observe=log)
    assert callbacks.steps == list(range(7)) and len(log.points) == 7


def test_time_budget_stops():
    spec, data, net = setup("gd", 0.5, max_steps=10_000_000, target_loss=None, time_budget_s=0.3)
    outcome = train(net, data, spec.training, lr=0.5, seed=0, callbacks=NullCallbacks(), observe=Log())
    assert outcome.outcome == "time_budget" and 0 < outcome.steps < 10_000_000


def test_cross_entropy_is_the_same_for_softmax_and_identity_heads():
    spec, data, net = setup()
    x, y = data.x_train, data.y_train
    ce = loss_function("cross_entropy", net)(x, y)
    net.head = "softmax"
    assert loss_function("cross_entropy", net)(x, y) == ce
    reference = torch.nn.functional.cross_entropy(net(x), y.argmax(1))
    assert ce.item() == pytest.approx(reference.item(), rel=1e-6)


def swish_max_slope() -> float:
    """L = sup_z d/dz z·σ(z), worked out here rather than copied from the code.

    The slope σ(z)(1 + z(1 − σ(z))) peaks where its own derivative σ(1 − σ)(2 − z·tanh(z/2))
    vanishes: z·tanh(z/2) = 2, bisected in float64. The peak of autograd's derivative of the
    engine's swish head over a fine float64 grid must be the same number."""
    lo, hi = 1.0, 4.0  # z·tanh(z/2) − 2 is increasing on z > 0: < 0 at 1, > 0 at 4
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid * math.tanh(mid / 2) < 2 else (lo, mid)
    sigma = 1 / (1 + math.exp(-lo))
    peak = sigma * (1 + lo * (1 - sigma))
    z = torch.linspace(-10, 10, 200_001, dtype=torch.float64, requires_grad=True)
    (slopes,) = torch.autograd.grad(apply_head("swish", z).sum(), z)
    assert slopes.max().item() == pytest.approx(peak, rel=1e-9)
    return peak


def test_auto_lr_is_one_over_the_top_eigenvalue_of_the_gauss_newton_hessian():
    spec, data, net = setup()
    net = net.double()
    x = data.x_train.double()
    lam = kernel_spectrum(tangent_kernel(net, x, method="jacobian", of="logits"))[1]
    lr = auto_lr(lam, len(x), head="identity", loss="mse")
    params = dict(net.named_parameters())
    J = torch.cat(
        [j.flatten(2) for j in torch.func.jacrev(lambda p: torch.func.functional_call(net, p, (x,)))(params).values()],
        dim=2,
    ).reshape(x.shape[0] * 2, -1)
    gauss_newton = J.T @ J / len(x)
    assert lr == pytest.approx(1.0 / torch.linalg.eigvalsh(gauss_newton)[-1].item(), rel=1e-9)
    assert auto_lr(lam, len(x), head="swish", loss="mse") == pytest.approx(lr / swish_max_slope() ** 2, rel=1e-6)

"""The engine as a library: every public diagnostic on plain torch modules (nn.Sequential, a custom nn.Module)
that have no ntklab `head` and no `forward_with_hidden`, checked against dense float64 references built here
from one flat parameter vector: the Jacobian J [n·O, p] by torch.func.jacrev, the Hessian of each f_a(x_i) by
torch.autograd.functional.hessian, and ∂f/∂α^(l) by jacrev of the network's tail."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call, jacrev

from ntklab.engine.curvature.hessian import model_hessian
from ntklab.engine.diagnostics.linearization import linearization_errors, weight_change
from ntklab.engine.diagnostics.sensitivity import layer_sensitivity
from ntklab.engine.kernels.ntk import gradient_norms, kernel_spectrum, relative_change, tangent_kernel

METHODS = ("auto", "structured", "jacobian", "ntk_vp")


class TwoBranch(nn.Module):
    """Not a Sequential: two branches added, a functional activation, a plain nn.Linear readout."""

    def __init__(self) -> None:
        super().__init__()
        self.left, self.right, self.readout = nn.Linear(3, 8), nn.Linear(3, 8, bias=False), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.readout(torch.tanh(self.left(x)) + torch.sin(self.right(x)))


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 12), nn.Tanh(), nn.Linear(12, 10), nn.Softplus(), nn.Linear(10, 2))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 4 * 4, 2))


def network(make) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    net = make().double()
    x = torch.randn(4, 1, 6, 6, dtype=torch.float64) if make is cnn else torch.randn(5, 3, dtype=torch.float64)
    return net, x


def flat_function(net: nn.Module):
    """(w [p], f(w) = net with the flat w, x [n, …] → [n, O])."""
    params = dict(net.named_parameters())
    shapes, sizes = [p.shape for p in params.values()], [p.numel() for p in params.values()]
    w = torch.cat([p.detach().reshape(-1) for p in params.values()])

    def f(flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        unflat = {name: t.reshape(s) for name, t, s in zip(params, torch.split(flat, sizes), shapes)}
        return functional_call(net, unflat, (x,))

    return w, f


def dense_jacobian(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """J [n·O, p], row i·O + a = ∇_w f_a(w; x_i)."""
    w, f = flat_function(net)
    J = jacrev(lambda flat: f(flat, x))(w)
    return J.reshape(-1, w.numel())


@pytest.mark.parametrize("make", [mlp, cnn, TwoBranch], ids=["sequential-mlp", "sequential-cnn", "custom-module"])
@pytest.mark.parametrize("method", METHODS)
def test_tangent_kernel_of_any_module_is_j_jt_and_its_outputs_are_its_logits(make, method):
    net, x = network(make)
    J = dense_jacobian(net, x)
    K = tangent_kernel(net, x, method=method)
    torch.testing.assert_close(K, J @ J.T, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(tangent_kernel(net, x, method=method, of="logits"), K, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(gradient_norms(K), torch.linalg.norm(J, dim=1), rtol=1e-10, atol=1e-12)
    eigenvalues = torch.linalg.eigvalsh(J @ J.T)
    lam_min, lam_max, _ = kernel_spectrum(K)
    assert lam_max == pytest.approx(float(eigenvalues[-1]), rel=1e-9)
    assert lam_min == pytest.approx(float(eigenvalues[0]), rel=1e-6, abs=1e-10)


@pytest.mark.parametrize("make", [mlp, TwoBranch], ids=["sequential-mlp", "custom-module"])
def test_linearization_error_and_weight_change_of_any_module_against_the_dense_taylor_model(make):
    net, x = network(make)
    w0 = {name: p.detach().clone() for name, p in net.named_parameters()}
    generator = torch.Generator().manual_seed(1)
    w = {name: t + 0.2 * torch.randn(t.shape, generator=generator, dtype=t.dtype) for name, t in w0.items()}
    flat0, f = flat_function(net)
    delta = torch.cat([(w[name] - w0[name]).reshape(-1) for name in w0])
    f0, f1 = f(flat0, x), f(flat0 + delta, x)
    f_lin = f0 + (dense_jacobian(net, x) @ delta).reshape(f0.shape)
    expected = float(torch.linalg.norm(f1 - f_lin) / torch.linalg.norm(f1 - f0))
    errors = linearization_errors(net, x, w0, w)
    assert errors["logits"] == pytest.approx(expected, rel=1e-10)
    assert errors["outputs"] == errors["logits"]  # no head: the outputs are the logits
    assert weight_change(w, w0) == pytest.approx((float(delta.norm()), float(delta.abs().max())), rel=1e-12)
    K0 = tangent_kernel(net, x)
    assert relative_change(K0, K0) == 0.0


def test_layer_sensitivity_of_a_sequential_is_the_jacobian_of_its_tail_at_each_activation():
    net, x = network(mlp)
    reported = layer_sensitivity(net, x)
    assert [layer.layer for layer in reported] == [1, 2]  # the Tanh and the Softplus; the Linears are not layers
    for layer, cut in zip(reported, (2, 4)):  # α^(1) = net[:2](x), α^(2) = net[:4](x)
        alpha = net[:cut](x).detach()
        tail = lambda a: net[cut:](a)  # noqa: E731
        per_point = torch.stack([jacrev(tail)(a_i.unsqueeze(0))[0, :, 0] for a_i in alpha]).detach()  # [n, O, width]
        assert layer.linf == pytest.approx(float(per_point.abs().amax()), rel=1e-12)
        assert layer.l2 == pytest.approx(float(torch.linalg.norm(per_point, dim=2).amax()), rel=1e-12)


def test_layer_sensitivity_of_a_module_without_activation_modules_reports_no_layers():
    net, x = network(TwoBranch)
    assert layer_sensitivity(net, x) == []


@pytest.mark.parametrize("make", [mlp, TwoBranch], ids=["sequential-mlp", "custom-module"])
def test_model_hessian_of_any_module_is_the_largest_eigenvalue_of_the_dense_hessian(make):
    net, x = network(make)
    probe = x[:2]
    w, f = flat_function(net)
    report = model_hessian(net, probe, top_k=1)
    for i in range(probe.shape[0]):
        for a in range(2):
            H = torch.autograd.functional.hessian(lambda flat: f(flat, probe[i : i + 1])[0, a], w)
            assert report.norms[i][a] == pytest.approx(float(torch.linalg.eigvalsh(H).abs().max()), rel=1e-8)
    assert report.norm == pytest.approx(max(max(row) for row in report.norms))

"""Hutchinson, SLQ and block norms against the dense spectrum of tiny nets (float64, torch.func.hessian).

The dense Hessians are formed from the definitions (a functional_call of the network, the loss
written out), never through the operators under test.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from torch.func import functional_call, hessian

from ntklab.api_schemas.spec import HessianSpectrumDiagnostics, JobSpec, model_spec
from ntklab.engine.curvature.flat_parameters import parameter_groups
from ntklab.engine.curvature.hessian_spectrum import hessian_spectrum
from ntklab.engine.curvature.linear_operator import LinearOperator
from ntklab.engine.curvature.operators import loss_hessian_operator, model_hessian_operator
from ntklab.engine.curvature.spectral_estimators import (
    gauss_quadrature,
    lanczos_tridiagonals,
    stochastic_lanczos_quadrature,
)
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network, trainable_parameters


def tiny(model: dict, n: int = 8, d: int = 3, seed: int = 0):
    net = build_network(model_spec(**model), (d,), seed=seed, dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, d, dtype=torch.float64, generator=generator)
    y = F.one_hot(torch.randint(0, net.output_dim, (n,), generator=generator), net.output_dim).double()
    return net, x, y


def flat(net):
    params = trainable_parameters(net)
    names, shapes, sizes = list(params), [p.shape for p in params.values()], [p.numel() for p in params.values()]
    w = torch.cat([p.detach().reshape(-1) for p in params.values()])
    return w, lambda w: {k: t.reshape(s) for k, t, s in zip(names, torch.split(w, sizes), shapes)}


def dense_model_hessian(net, x_i, a):
    w, unflatten = flat(net)
    return hessian(lambda w: apply_head(net.head, functional_call(net, unflatten(w), (x_i[None],)))[0, a])(w)


def dense_loss_hessian(net, x, y):
    """The mse loss L = (1/2n) Σ‖φ(f(x_i)) − y_i‖² of engine/training/loop.py, written out."""
    w, unflatten = flat(net)
    return hessian(
        lambda w: 0.5 * (apply_head(net.head, functional_call(net, unflatten(w), (x,))) - y).pow(2).sum() / len(x)
    )(w)


def rademacher_variance(A: torch.Tensor) -> float:
    """Var[vᵀAv] = 2(‖A‖_F² − Σ A_jj²) for Rademacher v."""
    return float(2 * (A.pow(2).sum() - A.diagonal().pow(2).sum()))


def model_case(model: dict, i: int, a: int):
    net, x, _ = tiny(model)
    return model_hessian_operator(net, x[i : i + 1])[a], dense_model_hessian(net, x[i], a)


def loss_case(model: dict):
    net, x, y = tiny(model)
    return loss_hessian_operator(net, x, y, "mse"), dense_loss_hessian(net, x, y)


HESSIANS = {
    "model, linear head": lambda: model_case(dict(hidden=[6], activation="tanh", output_dim=2), 0, 1),
    "model, swish head": lambda: model_case(
        dict(hidden=[5, 4], activation="softplus", output_dim=2, output_activation="swish"), 2, 0
    ),
    "loss, mse": lambda: loss_case(dict(hidden=[6], activation="tanh", output_dim=2)),
}


@pytest.mark.parametrize("name", list(HESSIANS))
def test_hutchinson_trace_is_within_three_standard_errors_and_the_error_is_the_rademacher_one(name):
    operator, H = HESSIANS[name]()
    probes = 400
    quadrature = stochastic_lanczos_quadrature(
        operator,
        probes=probes,
        steps=1,
        batch=probes,
        generator=torch.Generator().manual_seed(3),
    )
    se = quadrature.trace_standard_error()
    assert abs(quadrature.trace() - float(H.trace())) <= 3 * se
    assert se == pytest.approx(np.sqrt(rademacher_variance(H) / probes), rel=0.25)
    assert operator.products == probes


def test_slq_moments_are_the_dense_spectrum_moments_within_five_percent_and_three_standard_errors():
    net, x, y = tiny(dict(hidden=[16], activation="tanh", output_dim=2), n=20, d=4)
    operator = loss_hessian_operator(net, x, y, "mse")
    eigenvalues = torch.linalg.eigvalsh(dense_loss_hessian(net, x, y))
    probes = 2000
    quadrature = stochastic_lanczos_quadrature(
        operator,
        probes=probes,
        steps=6,
        batch=probes,
        generator=torch.Generator().manual_seed(0),
    )
    per_probe = np.array(
        [[np.dot(w, np.asarray(t) ** r) for r in range(1, 5)] for t, w in zip(quadrature.nodes, quadrature.weights)]
    )
    standard_errors = per_probe.std(axis=0, ddof=1) / np.sqrt(probes)
    for r, (estimate, se) in enumerate(zip(quadrature.moments(), standard_errors), start=1):
        exact = float((eigenvalues**r).mean())
        assert estimate == pytest.approx(exact, rel=0.05), r
        assert abs(estimate - exact) <= 3 * se, r


def test_k_lanczos_steps_integrate_polynomials_of_degree_2k_minus_1_exactly():
    operator, H = HESSIANS["loss, mse"]()
    q = torch.randint(0, 2, (1, operator.dim), generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 2 - 1
    q /= np.sqrt(operator.dim)
    nodes, weights = gauss_quadrature(*lanczos_tridiagonals(operator, q, 4)[0])
    assert weights.sum() == pytest.approx(1.0, rel=1e-12)
    power = q[0]
    for r in range(1, 8):
        power = H @ power
        assert np.dot(weights, nodes**r) == pytest.approx(float(q[0] @ power), rel=1e-9), r


def test_batched_lanczos_recurrences_equal_one_at_a_time():
    operator, _ = HESSIANS["model, swish head"]()
    starts = torch.randn(5, operator.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    starts /= torch.linalg.norm(starts, dim=1, keepdim=True)
    together = lanczos_tridiagonals(operator, starts, 12)
    for start, (alphas, betas) in zip(starts, together):
        one_alphas, one_betas = lanczos_tridiagonals(operator, start[None], 12)[0]
        np.testing.assert_allclose(alphas, one_alphas, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(betas, one_betas, rtol=1e-10, atol=1e-12)


def test_lanczos_stops_where_the_krylov_space_is_invariant():
    """A with 3 distinct eigenvalues: 3 steps are exact, the quadrature puts the start's mass on them."""
    Q, _ = torch.linalg.qr(torch.randn(40, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    spectrum = torch.tensor([-2.0] * 10 + [1.0] * 20 + [5.0] * 10, dtype=torch.float64)
    A = Q @ torch.diag(spectrum) @ Q.T
    q = torch.ones(1, 40, dtype=torch.float64) / np.sqrt(40)
    alphas, betas = lanczos_tridiagonals(LinearOperator.from_matrix(A), q, 30)[0]
    nodes, weights = gauss_quadrature(alphas, betas)
    assert len(alphas) == 3
    np.testing.assert_allclose(nodes, [-2.0, 1.0, 5.0], rtol=1e-10)
    projections = (Q.T @ q[0]) ** 2
    np.testing.assert_allclose(
        weights, [float(projections[spectrum == lam].sum()) for lam in (-2.0, 1.0, 5.0)], rtol=1e-8
    )


def test_the_smoothed_density_and_histogram_carry_mass_one_and_the_first_moment():
    net, x, y = tiny(dict(hidden=[6], activation="tanh", output_dim=2))
    spec = HessianSpectrumDiagnostics(of="loss", probes=8, lanczos_steps=10, grid=2000, bins=30, bandwidth=0.02)
    spectrum = hessian_spectrum(net, spec, x_probe=x, x_train=x, y_train=y, loss="mse").spectra[0][0]
    grid, values = np.array(spectrum.density["grid"]), np.array(spectrum.density["values"])
    assert np.trapezoid(values, grid) == pytest.approx(1.0, abs=1e-4)
    assert np.trapezoid(grid * values, grid) == pytest.approx(spectrum.moments[0], abs=1e-4 * np.abs(grid).max())
    assert sum(spectrum.histogram["mass"]) == pytest.approx(1.0, rel=1e-12)
    assert len(spectrum.histogram["edges"]) == 31 and len(grid) == 2000


@pytest.mark.parametrize("of", ["model", "loss"])
def test_block_norms_are_the_dense_hessians_diagonal_block_norms(of):
    net, x, y = tiny(dict(hidden=[5, 4], activation="softplus", output_dim=2, output_activation="swish"), n=4)
    spec = HessianSpectrumDiagnostics(of=of, points=2, probes=2, lanczos_steps=40, tolerance=0.0)
    report = hessian_spectrum(net, spec, x_probe=x, x_train=x, y_train=y, loss="mse")
    dense = (
        {(0, 0): dense_model_hessian(net, x[0], 0), (1, 1): dense_model_hessian(net, x[1], 1)}
        if of == "model"
        else {(0, 0): dense_loss_hessian(net, x, y)}
    )
    offsets, start = {}, 0
    for name, p in trainable_parameters(net).items():
        offsets[name] = slice(start, start + p.numel())
        start += p.numel()
    for (i, a), H in dense.items():
        for group, names in parameter_groups(net).items():
            index = torch.cat([torch.arange(offsets[n].start, offsets[n].stop) for n in names])
            block = H[index][:, index]
            expected = float(torch.linalg.eigvalsh(block).abs().max())
            assert report.spectra[i][a].block_norms[group] == pytest.approx(expected, rel=1e-8, abs=1e-12), group
    assert set(report.spectra[0][0].block_norms) == {"stages.0.layer", "stages.1.layer", "readout"}


def test_a_bottleneck_layers_block_stands_out():
    """‖∇²_{W_l} f‖ ∝ max_k |∂f/∂α_k σ''(z_k)|: the layer into a width-2 bottleneck has ∂f/∂α = O(1), not O(1/√m)."""
    x = torch.randn(1, 8, generator=torch.Generator().manual_seed(0))
    spec = HessianSpectrumDiagnostics(of="model", probes=1, lanczos_steps=20)
    blocks = {}
    for hidden in ([256, 256, 256], [256, 2, 256]):
        net = build_network(model_spec(hidden=hidden, activation="tanh", output_dim=1), (8,), seed=0)
        blocks[hidden[1]] = (
            hessian_spectrum(net, spec, x_probe=x, x_train=x, y_train=x, loss="mse").spectra[0][0].block_norms
        )
    bottleneck = blocks[2]
    assert max(bottleneck, key=bottleneck.get) == "stages.1.layer", bottleneck
    assert bottleneck["stages.1.layer"] > 5 * blocks[256]["stages.1.layer"], blocks
    assert bottleneck["readout"] == 0.0 and blocks[256]["readout"] == 0.0  # f is linear in the readout


def test_the_model_spectrum_has_one_report_per_point_and_output_and_averages_their_traces():
    net, x, y = tiny(dict(hidden=[6], activation="tanh", output_dim=2))
    spec = HessianSpectrumDiagnostics(of="model", points=3, probes=4, lanczos_steps=5)
    report = hessian_spectrum(net, spec, x_probe=x, x_train=x, y_train=y, loss="mse")
    assert [len(row) for row in report.spectra] == [2, 2, 2]
    traces = [s.trace for row in report.spectra for s in row]
    errors = [s.trace_se for row in report.spectra for s in row]
    assert report.trace == pytest.approx(np.mean(traces))
    assert report.trace_se == pytest.approx(np.sqrt(np.sum(np.square(errors))) / 6)
    groups = len(parameter_groups(net))
    assert report.hvps == sum(s.hvps for row in report.spectra for s in row) <= 6 * (4 * 5 + groups * 5)
    again = hessian_spectrum(net, spec, x_probe=x, x_train=x, y_train=y, loss="mse")
    assert again.spectra[1][0].nodes == report.spectra[1][0].nodes  # seeded


def test_the_spec_refuses_a_loss_kernel_over_its_limit_naming_the_field():
    spec = {"data": {"kind": "gaussian_mixture", "n_train": 2049, "classes": 2}, "diagnostics": {"loss_hessian": {}}}
    with pytest.raises(ValidationError, match=r"diagnostics\.loss_hessian.*4098 rows.*limit is 4096"):
        JobSpec.model_validate(spec)
    spec["data"]["n_train"] = 2048
    assert JobSpec.model_validate(spec).diagnostics.loss_hessian.iterations == 32
    with pytest.raises(ValidationError, match="probes"):
        JobSpec.model_validate({"diagnostics": {"hessian_spectrum": {"probes": 0}}})

"""Batched, certified Lanczos for the model Hessian (engine/curvature/hessian.py, lanczos.py, operators.py).

References are independent of the engine's torch.func path: dense Hessians by
torch.autograd.functional.hessian (reverse-over-reverse) of a hand-written flat function,
the sequential one-run-at-a-time Lanczos of lanczos_top_eigenvalues on single products,
and closed forms.
"""

import pytest
import torch
from torch import nn
from torch.func import functional_call

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.curvature.hessian import model_hessian
from ntklab.engine.curvature.lanczos import lanczos_many, lanczos_top_eigenvalues
from ntklab.engine.curvature.linear_operator import LinearOperator
from ntklab.engine.curvature.operators import model_hessian_operator
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network, trainable_parameters

NETS = {
    "mlp": (dict(hidden=[12, 10], activation="tanh", output_dim=3, output_activation="swish"), (4,)),
    "cnn": (
        dict(kind="cnn", hidden=[3, 4], activation="softplus", output_dim=3, output_activation="softmax"),
        (1, 5, 5),
    ),
    "resnet": (dict(kind="resnet", block="conv", hidden=[3], blocks=2, activation="gelu", output_dim=4), (1, 4, 4)),
}


def network(name):
    fields, shape = NETS[name]
    net = build_network(model_spec(**fields), shape, seed=0, dtype=torch.float64)
    x = torch.randn(3, *shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    return net, x


def dense_hessian(net, x_i, a, of="outputs"):
    """∇²_w y_a(w; x_i) [p, p] by torch.autograd (reverse-over-reverse) on the flat trainable parameters."""
    params = trainable_parameters(net)
    names, shapes, sizes = list(params), [t.shape for t in params.values()], [t.numel() for t in params.values()]
    w = torch.cat([t.detach().reshape(-1) for t in params.values()])
    head = getattr(net, "head", "identity") if of == "outputs" else "identity"

    def f(w):
        unflat = {k: t.reshape(s) for k, t, s in zip(names, torch.split(w, sizes), shapes)}
        return apply_head(head, functional_call(net, unflat, (x_i.unsqueeze(0),))).reshape(-1)[a]

    return torch.autograd.functional.hessian(f, w)


def sequential(net, x, *, top_k, iterations, tolerance):
    """One run at a time, one product per call, start vectors from one generator seeded 0 in (point, output) order."""
    generator = torch.Generator().manual_seed(0)
    H = model_hessian_operator(net, x, max_batch=1)

    def run(r):
        """H_r through the batch's own product, one row per call."""
        return LinearOperator(lambda V, members: H.apply(V, [r] * len(V)), H.dim, dtype=H.dtype, device=H.device)

    return [
        [
            lanczos_top_eigenvalues(
                run(i * net.output_dim + a),
                iterations=iterations,
                top_k=top_k,
                tolerance=tolerance,
                generator=generator,
            )
            for a in range(net.output_dim)
        ]
        for i in range(len(x))
    ]


@pytest.mark.parametrize("name", list(NETS))
@pytest.mark.parametrize("tolerance", [1e-6, 0.0])
def test_batched_lanczos_gives_the_sequential_ritz_values(name, tolerance):
    net, x = network(name)
    x, iterations = x[:2], 24
    expected = sequential(net, x, top_k=2, iterations=iterations, tolerance=tolerance)
    for max_batch in (None, 5):
        report = model_hessian(net, x, top_k=2, iterations=iterations, tolerance=tolerance, max_batch=max_batch)
        assert {m for row in report.methods for m in row} == {"lanczos"}
        for got_row, want_row in zip(report.eigenvalues, expected):
            for got, want in zip(got_row, want_row):
                assert got == pytest.approx(want, rel=1e-10, abs=1e-12)
    assert report.hvps == sum(sum(row) for row in report.run_hvps) <= len(x) * net.output_dim * iterations


@pytest.mark.parametrize("name", list(NETS))
@pytest.mark.parametrize("iterations", [6, 40])
def test_every_reported_bound_holds_against_the_dense_eigenvalues(name, iterations):
    net, x = network(name)
    report = model_hessian(net, x[:2], top_k=3, iterations=iterations, tolerance=1e-6)
    nontrivial = 0
    for i in range(2):
        for a in range(net.output_dim):
            H = dense_hessian(net, x[i], a)
            spectrum = torch.linalg.eigvalsh(H)
            rounding = 1e-12 * float(spectrum.abs().max())
            for value, bound in zip(report.eigenvalues[i][a], report.bounds[i][a]):
                error = float((spectrum - value).abs().min())
                assert error <= bound + rounding
                nontrivial += bound > 1e-8 * abs(value)
            if report.methods[i][a] == "lanczos" and report.run_hvps[i][a] < iterations:
                assert all(b <= 1e-6 * abs(v) for v, b in zip(report.eigenvalues[i][a], report.bounds[i][a]))
    if iterations == 6:
        assert nontrivial > 0  # a short run's bounds are wide, and still hold


def test_certified_stop_spends_fewer_products_than_the_cap_and_is_accurate():
    net, x = network("mlp")
    x = x[:2]
    report = model_hessian(net, x, top_k=1, iterations=200, tolerance=1e-6)
    p = sum(t.numel() for t in trainable_parameters(net).values())
    assert report.methods[0][0] == "lanczos" and p > 200
    for i in range(len(x)):
        for a in range(net.output_dim):
            assert report.run_hvps[i][a] < 200
            norm = float(torch.linalg.matrix_norm(dense_hessian(net, x[i], a), ord=2))
            assert report.norms[i][a] == pytest.approx(norm, rel=1e-6)


@pytest.mark.parametrize("of", ["outputs", "logits"])
def test_dense_path_agrees_with_lanczos_on_a_tiny_net(of):
    net = build_network(
        model_spec(hidden=[5], activation="tanh", output_dim=2, output_activation="sigmoid"),
        (3,),
        seed=3,
        dtype=torch.float64,
    )
    x = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    p = sum(t.numel() for t in trainable_parameters(net).values())  # 32
    dense = model_hessian(net, x, of=of, top_k=3, iterations=p)
    lanczos = model_hessian(net, x, of=of, top_k=3, iterations=p - 1, tolerance=1e-12)
    assert {m for row in dense.methods for m in row} == {"dense"}
    assert {m for row in lanczos.methods for m in row} == {"lanczos"}
    for i in range(2):
        for a in range(2):
            assert dense.eigenvalues[i][a] == pytest.approx(lanczos.eigenvalues[i][a], rel=1e-9)
            assert dense.run_hvps[i][a] == p
            assert max(dense.bounds[i][a]) < 1e-12 * dense.norms[i][a]
            exact = torch.linalg.eigvalsh(dense_hessian(net, x[i], a, of))
            assert dense.norms[i][a] == pytest.approx(float(exact.abs().max()), rel=1e-12)
    assert sum(dense.grad_norms, []) == pytest.approx(sum(lanczos.grad_norms, []), rel=1e-12)


def test_relu_readout_cross_terms_have_the_closed_form_spectrum():
    """f = m^-½ Σ_j v_j relu(d^-½ W_j·x): H = [[0, B], [Bᵀ, 0]], B's columns d^-½ m^-½ x on active units,
    so the eigenvalues are ±‖x‖/√(m·d), each as often as there are active units, and 0."""
    m, d = 8, 2
    net = build_network(model_spec(hidden=[m], output_dim=1, bias=False), (d,), seed=0, dtype=torch.float64)
    x = torch.randn(1, d, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    active = int((net.stages[0].layer(x) > 0).sum())
    sigma = float(torch.linalg.norm(x)) / (m * d) ** 0.5
    assert 0 < active < m
    dense = model_hessian(net, x, top_k=2 * active + 1, iterations=100)  # p = 24 ≤ 100: dense, with multiplicity
    assert dense.methods[0][0] == "dense"
    assert sorted(dense.eigenvalues[0][0]) == pytest.approx([-sigma] * active + [0.0] + [sigma] * active, abs=1e-12)
    lanczos = model_hessian(net, x, top_k=3, iterations=20)  # distinct values only, exact at the invariant space
    assert lanczos.methods[0][0] == "lanczos"
    assert sorted(lanczos.eigenvalues[0][0]) == pytest.approx([-sigma, 0.0, sigma], abs=1e-12)
    assert lanczos.run_hvps[0][0] == 3 and max(lanczos.bounds[0][0]) < 1e-12 * sigma


def test_any_module_works_its_outputs_being_its_logits():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2)).double()
    x = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    for iterations in (40, 100):  # p = 98: lanczos, then dense
        report = model_hessian(net, x, top_k=2, iterations=iterations, tolerance=1e-10)
        assert len(report.norms) == 2 and len(report.norms[0]) == 2
        for i in range(2):
            for a in range(2):
                exact = sorted(torch.linalg.eigvalsh(dense_hessian(net, x[i], a)).tolist(), key=abs, reverse=True)
                assert report.eigenvalues[i][a] == pytest.approx(exact[:2], rel=1e-8)


def test_progress_counts_every_product_and_only_lowers_its_plan():
    net, x = network("mlp")
    calls = []
    report = model_hessian(net, x, top_k=1, iterations=50, progress=lambda done, planned: calls.append((done, planned)))
    dones, plans = [c[0] for c in calls], [c[1] for c in calls]
    assert dones == sorted(dones) and plans == sorted(plans, reverse=True)
    assert plans[0] <= len(x) * net.output_dim * 50 and all(d <= p for d, p in calls)
    assert calls[-1] == (report.hvps, report.hvps)
    assert len(calls) == max(max(row) for row in report.run_hvps)  # one call per batched step


def test_lanczos_many_does_not_depend_on_how_many_runs_advance_together():
    generator = torch.Generator().manual_seed(2)
    operators = []
    for _ in range(5):
        Q, _ = torch.linalg.qr(torch.randn(60, 60, dtype=torch.float64, generator=generator))
        operators.append(Q @ torch.diag(torch.linspace(-3, 5, 60, dtype=torch.float64) ** 3) @ Q.T)

    block = LinearOperator.from_matrix(torch.stack(operators))

    def solve(max_active):
        return lanczos_many(
            block,
            steps=40,
            top_k=2,
            tolerance=1e-8,
            generator=torch.Generator().manual_seed(0),
            max_active=max_active,
        )

    together, one_by_one = solve(None), solve(1)
    for a, b in zip(together, one_by_one):
        assert a.values == pytest.approx(b.values, rel=1e-12) and a.matvecs == b.matvecs < 40
        assert a.values == pytest.approx([125.0, (5 - 8 / 59) ** 3], rel=1e-8)
        assert max(a.bounds) <= 1e-8 * 115

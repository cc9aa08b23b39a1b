import pytest
import torch
from torch.func import functional_call, hessian

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.curvature.hessian import hessian_vector_product, model_hessian
from ntklab.engine.curvature.lanczos import lanczos_top_eigenvalues
from ntklab.engine.curvature.linear_operator import LinearOperator
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network, trainable_parameters

TINY = {
    "linear-head": dict(hidden=[6], activation="tanh", output_dim=2),
    "softmax-head": dict(hidden=[5], activation="softplus", output_dim=3, output_activation="softmax"),
    "deep-swish-head": dict(hidden=[4, 3], activation=["gelu", "sigmoid"], output_dim=2, output_activation="swish"),
}


def flat_point_function(net, x_i, a, of):
    params = trainable_parameters(net)
    names, shapes = list(params), [p.shape for p in params.values()]
    sizes = [p.numel() for p in params.values()]
    w = torch.cat([p.detach().reshape(-1) for p in params.values()])

    def f(w):
        unflat = {k: t.reshape(s) for k, t, s in zip(names, torch.split(w, sizes), shapes)}
        logits = functional_call(net, unflat, (x_i.unsqueeze(0),))
        return (apply_head(net.head, logits) if of == "outputs" else logits)[0, a]

    return f, w


def top_by_magnitude(eigenvalues, k):
    return sorted(eigenvalues.tolist(), key=abs, reverse=True)[:k]


@pytest.mark.parametrize("name", list(TINY))
@pytest.mark.parametrize("of", ["outputs", "logits"])
@pytest.mark.parametrize("method", ["lanczos", "dense"])
def test_top3_matches_dense_hessian_eigenvalues(name, of, method):
    net = build_network(model_spec(**TINY[name]), (3,), seed=0, dtype=torch.float64)
    x = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    p = sum(t.numel() for t in trainable_parameters(net).values())
    report = model_hessian(net, x, of=of, top_k=3, iterations=p - 1 if method == "lanczos" else 200)
    assert {m for row in report.methods for m in row} == {method}
    for i in range(2):
        for a in range(net.output_dim):
            f, w = flat_point_function(net, x[i], a, of)
            dense = top_by_magnitude(torch.linalg.eigvalsh(hessian(f)(w)), 3)
            assert report.eigenvalues[i][a] == pytest.approx(dense, rel=1e-6, abs=1e-12)
            assert report.norms[i][a] == pytest.approx(abs(dense[0]), rel=1e-6)
            assert report.grad_norms[i][a] == pytest.approx(float(torch.linalg.norm(torch.func.grad(f)(w))), rel=1e-12)
    assert report.norm == max(max(row) for row in report.norms)
    assert 0 < report.hvps <= 2 * net.output_dim * 200


def test_lanczos_with_fewer_steps_than_dimension_finds_the_extreme_eigenvalues():
    generator = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(300, 300, dtype=torch.float64, generator=generator))
    spectrum = torch.cat(
        [torch.tensor([-9.0, 7.0, 5.0], dtype=torch.float64), torch.rand(297, dtype=torch.float64, generator=generator)]
    )
    A = Q @ torch.diag(spectrum) @ Q.T
    top = lanczos_top_eigenvalues(LinearOperator.from_matrix(A), iterations=40, top_k=3)
    assert top == pytest.approx([-9.0, 7.0, 5.0], rel=1e-8)


@pytest.mark.parametrize("name", list(TINY))
def test_hvp_matches_central_finite_differences_of_the_gradient(name):
    net = build_network(model_spec(**TINY[name]), (3,), seed=2, dtype=torch.float64)
    x_i = torch.randn(3, dtype=torch.float64)
    f, w = flat_point_function(net, x_i, 1, "outputs")
    v = torch.randn(w.numel(), dtype=torch.float64)
    eps = 1e-5
    gradient = torch.func.grad(f)
    finite_difference = (gradient(w + eps * v) - gradient(w - eps * v)) / (2 * eps)
    hv = hessian_vector_product(net, x_i, 1, v)
    torch.testing.assert_close(hv, finite_difference, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(hessian_vector_product(net, x_i.unsqueeze(0), 1, v), hv)


def test_relu_net_with_linear_head_has_a_hessian_of_only_cross_terms():
    net = build_network(model_spec(hidden=[8], output_dim=1, bias=False), (2,), seed=0, dtype=torch.float64)
    report = model_hessian(net, torch.randn(1, 2, dtype=torch.float64), top_k=2, iterations=20)  # p = 24: Lanczos
    largest, second = report.eigenvalues[0][0]
    assert largest == pytest.approx(-second, rel=1e-8)

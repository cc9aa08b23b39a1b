"""∇²L = G + R against dense float64 references (torch.func.hessian, jacrev), and the theory at small scale.

The references form every matrix: H = hessian(L)(w); J = jacrev(F)(w) [n, O, p] and
D_i = hessian(ℓ)(F_i) [O, O], G = (1/n) Σ_i J_iᵀ D_i J_i; R = (1/n) Σ_ia g_ia hessian(F_ia)(w)
with g = ∂ℓ/∂F. None of them goes through the operators under test.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, hessian, jacrev

from ntklab.api_schemas.spec import JobSpec, model_spec
from ntklab.engine.curvature.loss_hessian import loss_hessian_split
from ntklab.engine.curvature.operators import gauss_newton_operator, loss_hessian_operator, residual_operator
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network, trainable_parameters
from ntklab.engine.torch_threads import torch_threads
from ntklab.engine.training.data import load_data

CASES = {
    "mse, linear head": (dict(hidden=[5], activation="tanh", output_dim=2), "mse"),
    "mse, swish head": (
        dict(hidden=[4, 3], activation=["softplus", "gelu"], output_dim=2, output_activation="swish"),
        "mse",
    ),
    "cross-entropy, softmax head": (
        dict(hidden=[5], activation="tanh", output_dim=3, output_activation="softmax"),
        "cross_entropy",
    ),
}


def tiny_problem(model: dict, n: int = 6, d: int = 3, seed: int = 0):
    net = build_network(model_spec(**model), (d,), seed=seed, dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, d, dtype=torch.float64, generator=generator)
    labels = torch.randint(0, net.output_dim, (n,), generator=generator)
    y = F.one_hot(labels, net.output_dim).double() if net.output_dim > 1 else torch.randn(n, 1, dtype=torch.float64)
    return net, x, y


def dense_split(net, x, y, loss: str):
    """H, G, R [p, p] and J [n·O, p], D [n, O, O] by dense autograd, straight from the loss's definition."""
    params = trainable_parameters(net)
    names, shapes, sizes = list(params), [p.shape for p in params.values()], [p.numel() for p in params.values()]
    w = torch.cat([p.detach().reshape(-1) for p in params.values()])

    def model(w):
        logits = functional_call(net, {k: t.reshape(s) for k, t, s in zip(names, torch.split(w, sizes), shapes)}, (x,))
        return apply_head(net.head, logits) if loss == "mse" else logits

    def ell(out_i, y_i):
        if loss == "mse":
            return 0.5 * ((out_i - y_i) ** 2).sum()
        return -(y_i * torch.log_softmax(out_i, dim=-1)).sum()

    n = len(x)
    H = hessian(lambda w: sum(ell(out_i, y_i) for out_i, y_i in zip(model(w), y)) / n)(w)
    out = model(w).detach()
    J = jacrev(model)(w)  # [n, O, p]
    D = torch.stack([hessian(ell)(out[i], y[i]) for i in range(n)])
    G = torch.einsum("iap,iab,ibq->pq", J, D, J) / n
    g = torch.stack([torch.func.grad(ell)(out[i], y[i]) for i in range(n)])
    model_hessians = hessian(model)(w)  # [n, O, p, p]
    R = torch.einsum("ia,iapq->pq", g, model_hessians) / n
    return H, G, R, J.reshape(-1, w.numel()), D


def as_matrix(operator):
    return operator @ torch.eye(operator.dim, dtype=torch.float64)


@pytest.mark.parametrize("case", list(CASES))
def test_the_operators_are_the_dense_loss_hessian_its_gauss_newton_part_and_the_rest(case):
    model, loss = CASES[case]
    net, x, y = tiny_problem(model)
    H, G, R, _, _ = dense_split(net, x, y, loss)
    torch.testing.assert_close(G + R, H, rtol=1e-10, atol=1e-12)
    scale = float(H.abs().max())
    for operator, dense in ((loss_hessian_operator, H), (gauss_newton_operator, G), (residual_operator, R)):
        torch.testing.assert_close(as_matrix(operator(net, x, y, loss)), dense, rtol=1e-8, atol=1e-8 * scale)


@pytest.mark.parametrize("case", list(CASES))
def test_the_split_norms_and_the_kernel_lambda_min_match_dense_eigenvalues(case):
    model, loss = CASES[case]
    net, x, y = tiny_problem(model)
    H, G, R, J, _ = dense_split(net, x, y, loss)
    p = H.shape[0]
    split = loss_hessian_split(net, x, y, loss, iterations=p, tolerance=0.0)

    def dense_norm(A):
        return float(torch.linalg.eigvalsh(A).abs().max())

    assert split.norm == pytest.approx(dense_norm(H), rel=1e-8)
    assert split.gauss_newton_norm == pytest.approx(dense_norm(G), rel=1e-8)
    assert split.rest_norm == pytest.approx(dense_norm(R), rel=1e-8)
    assert split.kernel_lambda_min == pytest.approx(float(torch.linalg.eigvalsh(J @ J.T)[0]), rel=1e-8, abs=1e-12)
    assert 0 < split.hvps <= 3 * p


@pytest.mark.parametrize("case", list(CASES))
def test_the_gauss_newton_norm_is_the_top_eigenvalue_of_the_loss_curvature_weighted_kernel_over_n(case):
    """λ_max(G) = λ_max((1/n) D^½ K D^½), K the tangent kernel of the function the loss reads (D = I for mse)."""
    model, loss = CASES[case]
    net, x, y = tiny_problem(model)
    _, _, _, _, D = dense_split(net, x, y, loss)
    K = tangent_kernel(net, x, of="outputs" if loss == "mse" else "logits")
    values, vectors = torch.linalg.eigh(D)
    root = torch.block_diag(*(v @ torch.diag(lam.clamp(min=0).sqrt()) @ v.T for lam, v in zip(values, vectors)))
    from_kernel = float(torch.linalg.eigvalsh(root @ K @ root)[-1]) / len(x)
    split = loss_hessian_split(net, x, y, loss, iterations=200, tolerance=0.0)
    assert split.gauss_newton_norm == pytest.approx(from_kernel, rel=1e-8)


def test_the_mse_loss_satisfies_pl_star_with_mu_lambda_min_over_n_and_it_is_tight():
    """½‖∇L‖² ≥ (λ_min(K)/n) · L for any targets, with equality when the residual is K's bottom eigenvector."""
    net, x, y = tiny_problem(dict(hidden=[12], activation="tanh", output_dim=1), n=5)
    params = list(trainable_parameters(net).values())

    def pl_ratio(targets):
        loss = 0.5 * (net(x) - targets).pow(2).sum() / len(x)
        squared = sum(float(g.pow(2).sum()) for g in torch.autograd.grad(loss, params))
        return 0.5 * squared / loss.item()

    mu = loss_hessian_split(net, x, y, "mse", iterations=8).kernel_lambda_min / len(x)
    assert mu > 0
    assert pl_ratio(y) >= mu
    _, vectors = torch.linalg.eigh(tangent_kernel(net, x))
    with torch.no_grad():
        tight = net(x) - 0.1 * vectors[:, 0].reshape(len(x), 1)
    assert pl_ratio(tight) == pytest.approx(mu, rel=1e-8)


# --------------------------------------------------------------------------- the theory at small scale

WIDTHS = [100, 400, 1600]


@pytest.fixture
def one_thread():
    with torch_threads(1):
        yield


def rest_norms(head: str, seeds: range) -> list[float]:
    """Mean over seeds of ‖∇²L − G‖ at init, one hidden softplus layer, NTK, no biases (test_theory.py's set-up)."""
    norms = []
    for m in WIDTHS:
        values = []
        for seed in seeds:
            spec = JobSpec.model_validate(
                {
                    "seed": seed,
                    "data": {
                        "kind": "gaussian_mixture",
                        "n_train": 16,
                        "input_dim": 32,
                        "classes": 2,
                        "mean_scale": 0.5,
                        "sigma": 0.5,
                    },
                    "model": {"hidden": [m], "activation": "softplus", "output_activation": head, "bias": False},
                }
            )
            data = load_data(spec)
            net = build_network(spec.model, data.input_shape, seed=seed)
            values.append(loss_hessian_split(net, data.x_train, data.y_train, "mse", iterations=16).rest_norm)
        norms.append(float(np.mean(values)))
    return norms


def slope(values) -> float:
    return float(np.polyfit(np.log(WIDTHS), np.log(values), 1)[0])


def test_the_non_gauss_newton_part_falls_with_width_for_a_linear_head(one_thread):
    norms = rest_norms("identity", range(3))
    assert slope(norms) < -0.4, norms


def test_the_non_gauss_newton_part_does_not_fall_with_width_for_a_swish_head(one_thread):
    norms = rest_norms("swish", range(3))
    assert slope(norms) > -0.15, norms

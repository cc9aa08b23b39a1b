"""The operator protocol (engine/curvature/linear_operator.py) on every curvature operator, against dense float64.

Each operator of engine/curvature/operators.py is checked against a matrix formed here from the
definitions by torch.func (hessian, jacrev of a hand-written flat function of the weights), never
through the operators: `@` on a vector and on a block of vectors, a member of a batch,
to_scipy(), the product count, shape, dtype and device.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.linalg import block_diag
from scipy.sparse.linalg import eigsh
from torch.func import functional_call, hessian, jacrev

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.curvature.lanczos import lanczos_top_eigenvalues
from ntklab.engine.curvature.linear_operator import LinearOperator
from ntklab.engine.curvature.operators import (
    gauss_newton_operator,
    loss_hessian_operator,
    model_hessian_operator,
    residual_operator,
    tangent_kernel_operator,
)
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network, trainable_parameters

MODEL = dict(hidden=[5, 4], activation=["tanh", "softplus"], output_dim=2, output_activation="swish")


def problem(n=4):
    net = build_network(model_spec(**MODEL), (3,), seed=0, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, dtype=torch.float64, generator=generator)
    y = F.one_hot(torch.randint(0, 2, (n,), generator=generator), 2).double()
    return net, x, y


def flat_function(net, x):
    """w ↦ φ(f(w; x)) [n, O] over the flat trainable weights, and w."""
    params = trainable_parameters(net)
    names, shapes, sizes = list(params), [t.shape for t in params.values()], [t.numel() for t in params.values()]
    w = torch.cat([t.detach().reshape(-1) for t in params.values()])

    def function(w):
        unflat = {k: t.reshape(s) for k, t, s in zip(names, torch.split(w, sizes), shapes)}
        return apply_head(net.head, functional_call(net, unflat, (x,)))

    return function, w


def dense(name, net, x, y):
    """The operator's matrix from its definition: [R, p, p] for the batched model Hessian, [m, m] otherwise."""
    function, w = flat_function(net, x)
    n, O = len(x), net.output_dim
    J = jacrev(function)(w).reshape(n * O, -1)
    if name == "model Hessian":
        return torch.stack([hessian(lambda w, i=i, a=a: function(w)[i, a])(w) for i in range(n) for a in range(O)])
    if name == "tangent kernel":
        return J @ J.T
    H = hessian(lambda w: 0.5 * (function(w) - y).pow(2).sum() / n)(w)
    G = J.T @ J / n  # mse: ∇²ℓ = I
    return {"loss Hessian": H, "Gauss–Newton": G, "rest": H - G}[name]


OPERATORS = {
    "model Hessian": lambda net, x, y: model_hessian_operator(net, x, max_batch=3),
    "loss Hessian": lambda net, x, y: loss_hessian_operator(net, x, y, "mse"),
    "Gauss–Newton": lambda net, x, y: gauss_newton_operator(net, x, y, "mse"),
    "rest": lambda net, x, y: residual_operator(net, x, y, "mse"),
    "tangent kernel": lambda net, x, y: tangent_kernel_operator(net, x),
}


def case(name):
    net, x, y = problem()
    return OPERATORS[name](net, x, y), dense(name, net, x, y)


@pytest.mark.parametrize("name", list(OPERATORS))
def test_vector_and_block_products_are_the_dense_matrix_and_agree_column_by_column(name):
    A, M = case(name)
    assert A.shape == tuple(M.shape) and A.dtype == torch.float64 and A.device == torch.device("cpu")
    generator = torch.Generator().manual_seed(2)
    X = torch.randn(*A.batch_shape, A.dim, 3, dtype=torch.float64, generator=generator)
    block = A @ X
    columns = torch.stack([A @ X[..., j] for j in range(3)], dim=-1)
    scale = float(M.abs().max())
    torch.testing.assert_close(block, M @ X, rtol=1e-9, atol=1e-10 * scale)
    torch.testing.assert_close(columns, block, rtol=1e-10, atol=1e-12 * scale)


@pytest.mark.parametrize("name", list(OPERATORS))
def test_to_scipy_is_the_dense_matrix_block_diagonal_over_a_batch(name):
    A, M = case(name)
    matrix = block_diag(*M.numpy()) if A.batch_shape else M.numpy()
    scipy_operator = A.to_scipy()
    assert scipy_operator.shape == matrix.shape and scipy_operator.dtype == np.float64
    x = np.random.default_rng(3).standard_normal((matrix.shape[0], 2))
    scale = np.abs(matrix).max()
    np.testing.assert_allclose(scipy_operator @ x[:, 0], matrix @ x[:, 0], rtol=1e-9, atol=1e-10 * scale)
    np.testing.assert_allclose(scipy_operator @ x, matrix @ x, rtol=1e-9, atol=1e-10 * scale)
    np.testing.assert_allclose(scipy_operator.rmatvec(x[:, 1]), matrix.T @ x[:, 1], rtol=1e-9, atol=1e-10 * scale)


@pytest.mark.parametrize("name", list(OPERATORS))
def test_the_count_is_one_per_vector_and_per_column_on_every_view(name):
    A, _ = case(name)
    members = A.members
    v = torch.ones(*A.batch_shape, A.dim, dtype=torch.float64)
    A @ v
    assert A.products == members
    A @ torch.ones(*A.batch_shape, A.dim, 4, dtype=torch.float64)
    assert A.products == members + 4 * members
    A.apply(torch.ones(5, A.dim, dtype=torch.float64), [0] * 5 if A.batch_shape else None)
    assert A.products == 5 * members + 5
    A.to_scipy().matvec(np.ones(members * A.dim))
    assert A.products == 6 * members + 5
    seen = []
    A.observed(seen.append).apply(torch.ones(2, A.dim, dtype=torch.float64), [0, 0] if A.batch_shape else None)
    assert seen == [2] and A.products == 6 * members + 7


def test_a_model_hessian_member_is_its_run_and_counts_into_the_batch():
    net, x, y = problem()
    H, M = OPERATORS["model Hessian"](net, x, y), dense("model Hessian", net, x, y)
    assert H.batch_shape == (len(x) * net.output_dim,)
    v = torch.randn(H.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    for r in (0, 5, H.members - 1):
        member = H[r]
        assert member.shape == (H.dim, H.dim)
        torch.testing.assert_close(member @ v, M[r] @ v, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(H.apply(v[None], [r])[0], M[r] @ v, rtol=1e-9, atol=1e-12)
    assert H.products == 6
    with pytest.raises(IndexError):
        H[H.members]


def test_the_tangent_kernel_operator_is_the_engines_kernel_and_its_top_eigenvalue_is_n_times_the_gauss_newton_one():
    net, x, y = problem(n=6)
    K = tangent_kernel_operator(net, x)
    torch.testing.assert_close(
        K @ torch.eye(K.dim, dtype=torch.float64), tangent_kernel(net, x), rtol=1e-10, atol=1e-12
    )
    G = gauss_newton_operator(net, x, y, "mse")
    top_K = lanczos_top_eigenvalues(K, iterations=K.dim)[0]
    top_G = float(eigsh(G.to_scipy(), k=1, which="LA", return_eigenvectors=False)[0])
    assert top_K / len(x) == pytest.approx(top_G, rel=1e-8)


def test_a_matrix_and_a_batch_of_matrices_are_operators():
    generator = torch.Generator().manual_seed(5)
    A = torch.randn(3, 6, 6, dtype=torch.float64, generator=generator)
    batch, one = LinearOperator.from_matrix(A), LinearOperator.from_matrix(A[1])
    X = torch.randn(3, 6, 2, dtype=torch.float64, generator=generator)
    torch.testing.assert_close(batch @ X, A @ X)
    torch.testing.assert_close(batch[1] @ X[1, :, 0], A[1] @ X[1, :, 0])
    torch.testing.assert_close(one @ X[1], A[1] @ X[1])
    for wrong in (torch.ones(6), torch.ones(3, 5), torch.ones(3, 6, 2, 1)):
        with pytest.raises(ValueError):
            batch @ wrong
    with pytest.raises(IndexError):
        one[0]

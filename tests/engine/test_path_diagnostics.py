"""The small diagnostic functions against independent dense float64 references."""

import numpy as np
import pytest
import torch
from torch.func import functional_call, hessian, jacrev

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.curvature.hessian import hessian_grad_ratio, model_hessian
from ntklab.engine.diagnostics.linearization import linearization_errors, weight_change
from ntklab.engine.kernels.ntk import gradient_norms, tangent_kernel
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network, trainable_parameters

MODELS = {
    "mlp-swish-head": (dict(hidden=[7, 5], activation="tanh", output_dim=2, output_activation="swish"), (3,)),
    "mlp-frozen-readout": (dict(hidden=[6], activation="softplus", output_dim=2, train_output_layer=False), (3,)),
    "cnn-sigmoid-head": (dict(kind="cnn", hidden=[2, 3], output_dim=2, output_activation="sigmoid"), (1, 5, 5)),
}


def model(name, dtype=torch.float64):
    fields, shape = MODELS[name]
    net = build_network(model_spec(**fields), shape, seed=0, dtype=dtype)
    x = torch.randn(4, *shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    return net, x


def flat_map(net, x, of="outputs"):
    """(w₀ flat [p], w ↦ vec(φ(f(w; X))) [n·O]) over the trainable parameters."""
    params = trainable_parameters(net)
    names, shapes, sizes = list(params), [p.shape for p in params.values()], [p.numel() for p in params.values()]

    def f(w):
        unflat = {k: t.reshape(s) for k, t, s in zip(names, torch.split(w, sizes), shapes)}
        logits = functional_call(net, unflat, (x,), strict=False)
        return (apply_head(net.head, logits) if of == "outputs" else logits).reshape(-1)

    return torch.cat([p.detach().reshape(-1) for p in params.values()]), f


def moved(net, scale=0.1, seed=2):
    """The net's trainable weights plus Gaussian noise of the given scale, by name."""
    g = torch.Generator().manual_seed(seed)
    return {
        name: p.detach() + scale * torch.randn(p.shape, generator=g, dtype=p.dtype)
        for name, p in trainable_parameters(net).items()
    }


# --------------------------------------------------------------------------- weight change


@pytest.mark.parametrize("name", list(MODELS))
def test_weight_change_is_the_norms_of_the_flattened_difference(name):
    net, _ = model(name)
    w0 = {k: p.detach().clone() for k, p in trainable_parameters(net).items()}
    w = moved(net)
    delta = np.concatenate([(w[k].numpy().astype(np.float64) - w0[k].numpy()).ravel() for k in w0])
    l2, linf = weight_change(w, w0)
    assert l2 == pytest.approx(np.linalg.norm(delta), rel=1e-12)
    assert linf == pytest.approx(np.abs(delta).max(), rel=1e-12)


def test_weight_change_counts_only_the_parameters_given():
    net, _ = model("mlp-frozen-readout")
    trainable = trainable_parameters(net)
    assert "readout.weight" not in trainable
    w0 = {k: p.detach().clone() for k, p in trainable.items()}
    with torch.no_grad():
        net.readout.weight.add_(100.0)
    assert weight_change(trainable_parameters(net), w0) == (0.0, 0.0)


def test_weight_change_in_float32():
    net, _ = model("mlp-swish-head", dtype=torch.float32)
    w0 = {k: p.detach().clone() for k, p in trainable_parameters(net).items()}
    w = moved(net, scale=1e-3)
    delta = np.concatenate([(w[k].numpy().astype(np.float64) - w0[k].numpy()).ravel() for k in w0])
    l2, linf = weight_change(w, w0)
    assert l2 == pytest.approx(np.linalg.norm(delta), rel=1e-5)
    assert linf == pytest.approx(np.abs(delta).max(), rel=1e-5)


# --------------------------------------------------------------------------- gradient norm


@pytest.mark.parametrize("method", ["structured", "jacobian", "ntk_vp"])
@pytest.mark.parametrize("of", ["outputs", "logits"])
@pytest.mark.parametrize("name", list(MODELS))
def test_gradient_norms_are_the_rows_of_a_dense_jacobian(name, of, method):
    net, x = model(name)
    w, f = flat_map(net, x, of)
    J = jacrev(f)(w)  # [n·O, p], row i·O + a = ∇_w f_a(x_i)
    norms = gradient_norms(tangent_kernel(net, x, method=method, of=of))
    assert norms.shape == (x.shape[0] * net.output_dim,)
    torch.testing.assert_close(norms, torch.linalg.vector_norm(J, dim=1), rtol=1e-10, atol=0)


def test_gradient_norms_of_a_gram_matrix_and_rounding_below_zero():
    J = torch.randn(6, 11, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    torch.testing.assert_close(gradient_norms(J @ J.T), J.norm(dim=1), rtol=1e-12, atol=0)
    assert gradient_norms(torch.diag(torch.tensor([4.0, -1e-18]))).tolist() == [2.0, 0.0]


# --------------------------------------------------------------------------- ‖H‖ / ‖∇f‖


def dense_hessian_and_gradient_norms(net, x, of="outputs"):
    """[P][O] of ‖∇²_w f_a(x_i)‖₂ (largest |eigenvalue| of the dense Hessian) and of ‖∇_w f_a(x_i)‖."""
    hessian_norms, grad_norms = [], []
    for i in range(x.shape[0]):
        w, f = flat_map(net, x[i : i + 1], of)
        J = jacrev(f)(w)
        H = hessian(f)(w)  # [O, p, p]
        hessian_norms.append([torch.linalg.eigvalsh(H[a]).abs().max().item() for a in range(H.shape[0])])
        grad_norms.append([J[a].norm().item() for a in range(J.shape[0])])
    return hessian_norms, grad_norms


@pytest.mark.parametrize("power", [1, 2])
def test_hessian_grad_ratio_is_the_largest_quotient_of_dense_norms(power):
    net, x = model("mlp-swish-head")
    h, g = dense_hessian_and_gradient_norms(net, x)
    expected = max(h[i][a] / g[i][a] ** power for i in range(len(h)) for a in range(len(h[i])))
    assert hessian_grad_ratio(h, g, power=power) == pytest.approx(expected, rel=1e-15)
    report = model_hessian(net, x, of="outputs", iterations=200)
    np.testing.assert_allclose(report.grad_norms, g, rtol=1e-10)
    assert hessian_grad_ratio(report.norms, report.grad_norms, power=power) == pytest.approx(expected, rel=1e-8)


def test_hessian_grad_ratio_leaves_out_zero_gradients():
    assert hessian_grad_ratio([[1.0, 5.0], [3.0, 0.0]], [[2.0, 0.0], [1.0, 4.0]]) == 3.0
    assert hessian_grad_ratio([[1.0, 5.0]], [[2.0, 0.0]], power=2) == 0.25


# --------------------------------------------------------------------------- linearization error


@pytest.mark.parametrize("name", list(MODELS))
def test_linearization_errors_match_a_dense_taylor_model(name):
    net, x = model(name)
    w0 = {k: p.detach().clone() for k, p in trainable_parameters(net).items()}
    w = moved(net, scale=0.3)
    w_flat = torch.cat([t.reshape(-1) for t in w.values()])
    errors = linearization_errors(net, x, w0, w)
    for of in ("logits", "outputs"):
        w0_flat, f = flat_map(net, x, of)
        f_lin = f(w0_flat) + jacrev(f)(w0_flat) @ (w_flat - w0_flat)
        expected = (torch.linalg.norm(f(w_flat) - f_lin) / torch.linalg.norm(f(w_flat) - f(w0_flat))).item()
        assert errors[of] == pytest.approx(expected, rel=1e-10)


def test_linearization_error_is_undefined_at_w0():
    net, x = model("mlp-swish-head")
    w0 = {k: p.detach().clone() for k, p in trainable_parameters(net).items()}
    assert linearization_errors(net, x, w0, trainable_parameters(net)) == {"logits": None, "outputs": None}

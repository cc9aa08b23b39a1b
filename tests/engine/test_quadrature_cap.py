"""The polar rule's work cap: it bounds the pairs sent to the 2-D rule, the error it reports stays true,
and a run whose error exceeds its tolerance says so (infinite_width_quadrature_inexact)."""

from __future__ import annotations

import torch

from ntklab.api_schemas.spec import InfiniteWidthDiagnostics
from ntklab.engine.diagnostics.run_warnings import quadrature_above_tolerance
from ntklab.engine.limits import gauss_hermite


def _saturating_layer(n: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    """Variances [n, 1] and covariances [n, n, 1, 1] of tanh units at large variance, correlations near 1."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64) * 0.05 + torch.tensor(
        [1.0, 0.0, 0.0, 0.0], dtype=torch.float64
    )
    cov = 30.0 * (x @ x.T)
    return torch.diagonal(cov)[:, None], cov[:, :, None, None]


def test_the_cap_leaves_pairs_on_the_series_and_their_reported_bound_holds(monkeypatch):
    variance, covariance = _saturating_layer()
    E_ref, Ed_ref, _, bound_ref = gauss_hermite.quadrature("tanh", variance, covariance, tolerance=1e-10)
    assert bound_ref.max() <= 1e-10
    monkeypatch.setattr(gauss_hermite, "MAX_POLAR_PAIRS", 8)
    E, Ed, _, bound = gauss_hermite.quadrature("tanh", variance, covariance, tolerance=1e-10)
    assert bound.max() > 1e-10, "the cap should leave some pairs above the tolerance here"
    scale = torch.sqrt(torch.diagonal(E_ref)[:, None] * torch.diagonal(E_ref)[None, :])
    true_error = ((E - E_ref).abs() / scale)[..., 0, 0]
    assert (true_error <= bound[..., 0, 0] + 1e-12).all()
    assert int((bound > 1e-10).sum()) <= variance.shape[0] ** 2 - 8


def test_a_run_above_its_quadrature_tolerance_is_warned_and_one_within_is_not():
    limit = InfiniteWidthDiagnostics(quadrature_tolerance=1e-10)
    (warning,) = quadrature_above_tolerance(limit, {"kernel_inf_quadrature_error": 3e-6})
    assert warning.code == "infinite_width_quadrature_inexact" and warning.values == {"error": 3e-6, "tolerance": 1e-10}
    assert quadrature_above_tolerance(limit, {"kernel_inf_quadrature_error": 5e-11}) == []
    assert quadrature_above_tolerance(None, {}) == []

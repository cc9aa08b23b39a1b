"""The estimate's terms for the infinite-width kernels, the Hessian spectrum and the loss-Hessian split
(planner/estimate.py, planner/limit_cost.py) against the engine they predict.

Memory: each spec makes one new diagnostic's working set a few hundred MB and runs twice in a fresh
interpreter (tests/engine/test_estimate_peaks.py's measured_growth: peak resident growth), with the
diagnostic and without it. What the diagnostic added, growth(with) − growth(without), must not exceed
its term (the term is an upper bound of that phase), and the whole estimate must stay within 2× of the
whole growth (not wildly pessimistic; the growth includes torch's own ~0.1–0.25 GB the estimate leaves out).

Work: the Hessian spectrum's HVPs are counted by the engine; the estimate's count must equal it when
every Lanczos run goes to lanczos_steps (tolerance 0), and the split takes at most the 3·iterations
HVPs the estimate charges. The Gauss–Hermite rules and closed forms the estimate assumes are the engine's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ntklab.api_schemas.base import Activation
from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.curvature.hessian_spectrum import hessian_spectrum
from ntklab.engine.curvature.loss_hessian import loss_hessian_split
from ntklab.engine.limits import gauss_hermite
from ntklab.engine.nets.network import build_network
from ntklab.planner.estimate import estimate_job, spectrum_hvps
from ntklab.planner.limit_cost import CLOSED_FORMS, RULES
from tests.engine.test_estimate_peaks import measured_growth

OFF = {"kernel": None, "hessian": None, "layer_sensitivity": False, "save_kernels": [], "save_weights": False}

PEAK_SPECS = {
    "infinite_width": (
        "infinite_width",
        {  # [16, 16, 256, 256] float64 maps of 16×16 images: 134 MB each, K and Θ overwritten map by map
            "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 768, "probe": {"n": 16}},
            "model": {"kind": "cnn", "hidden": [4, 4], "input_shape": [3, 16, 16], "readout": "global_avg"},
            "training": {"max_steps": 1, "lr": 0.1},
            "diagnostics": OFF | {"infinite_width": {}},
        },
    ),
    "spectrum": (
        "hessian_spectrum",
        {  # one probe's float64 basis of 16 + 6 vectors of 2.92 M weights: ≈ 0.6 GB
            "data": {
                "kind": "gaussian_mixture",
                "n_train": 16,
                "input_dim": 16,
                "targets": "signed",
                "probe": {"n": 2},
            },
            "model": {"hidden": [1700, 1700]},
            "training": {"max_steps": 1, "lr": 0.01},
            "diagnostics": OFF
            | {
                "linearization_error": False,
                "hessian_spectrum": {"of": "loss", "at": ["init"], "probes": 1, "lanczos_steps": 16, "tolerance": 0},
            },
        },
    ),
    "loss_hessian": (
        "loss_hessian",
        {  # the tangent kernel of 1536 × 2 training rows and its float64 copies: ≈ 0.4 GB
            "data": {"kind": "gaussian_mixture", "n_train": 1536, "input_dim": 8},
            "model": {"hidden": [32]},
            "training": {"max_steps": 1, "lr": 0.1},
            "diagnostics": OFF | {"loss_hessian": {"iterations": 8}},
        },
    ),
}


@pytest.mark.slow  # a fresh process per case measuring its peak RSS (0.4–0.9 GB): 70–110 s each on a loaded 2-core machine
@pytest.mark.parametrize("name", sorted(PEAK_SPECS))
def test_a_new_diagnostic_term_bounds_the_memory_it_adds(name):
    field, spec = PEAK_SPECS[name]
    estimate = estimate_job(JobSpec.model_validate(spec))
    assert estimate.memory_dominant.name == name
    term = estimate.memory_dominant.value
    growth = measured_growth(spec)
    baseline = measured_growth(spec | {"diagnostics": spec["diagnostics"] | {field: None}})
    added = growth - baseline
    assert added > 150 * 2**20, f"{name}: the diagnostic added only {added} bytes; too small to compare"
    assert added <= term, f"{name}: the diagnostic added {added} bytes, its term is {term} (×{term / added:.2f})"
    assert estimate.memory_bytes <= 2 * growth, f"{name}: estimated {estimate.memory_bytes}, measured {growth}"


def tiny(model: dict, diagnostics: dict | None = None, n: int = 6, d: int = 3):
    spec = JobSpec.model_validate(
        {
            "data": {"kind": "gaussian_mixture", "n_train": n, "input_dim": d, "classes": 2, "probe": {"n": n}},
            "model": model,
            "diagnostics": diagnostics or {},
        }
    )
    net = build_network(spec.model, (d,), seed=0, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(n, d, dtype=torch.float64, generator=generator)
    y = F.one_hot(torch.randint(0, 2, (n,), generator=generator), 2).double()
    return spec, net, x, y


GRAPH = {
    "kind": "graph",
    "layers": [  # a residual with a projection (6 → 5) owns two groups
        {"type": "dense", "width": 6},
        {"type": "activation", "name": "tanh"},
        {"type": "residual", "layers": [{"type": "dense", "width": 5}, {"type": "activation", "name": "tanh"}]},
    ],
}


@pytest.mark.parametrize("of", ["model", "loss"])
@pytest.mark.parametrize("model", [{"hidden": [7, 5]}, GRAPH], ids=["mlp", "graph"])
def test_the_spectrum_hvps_are_the_engine_s_count(of, model):
    """SLQ runs every probe to lanczos_steps: exactly the count. A block's Krylov space can be invariant
    early (the readout's block of the model Hessian is 0): at most the count, and more than SLQ alone."""
    wanted = {"of": of, "at": ["init"], "points": 2, "probes": 3, "lanczos_steps": 4, "tolerance": 0}
    counts = {}
    for blocks in (False, True):
        spec, net, x, y = tiny(model, {"hessian_spectrum": wanted | {"block_norms": blocks}})
        report = hessian_spectrum(net, spec.diagnostics.hessian_spectrum, x_probe=x, x_train=x, y_train=y, loss="mse")
        counts[blocks] = report.hvps, spectrum_hvps(spec)
    assert counts[False][0] == counts[False][1] > 0
    assert counts[False][0] < counts[True][0] <= counts[True][1]


def test_the_split_takes_at_most_the_hvps_the_estimate_charges():
    _, net, x, y = tiny({"hidden": [6]})
    split = loss_hessian_split(net, x, y, "mse", iterations=5, tolerance=0)
    assert 0 < split.hvps <= 3 * 5


def test_the_estimate_assumes_the_engine_s_rules_and_closed_forms():
    assert RULES == gauss_hermite.ORDERS
    c = torch.tensor([0.3], dtype=torch.float64)
    closed = {name for name in Activation.__args__ if gauss_hermite.closed_form(name, c + 1, c + 1, c) is not None}
    assert closed == CLOSED_FORMS

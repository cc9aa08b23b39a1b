"""The estimate's seconds (planner/estimate.py): FLOPs / R + dispatched operations × t_op.

The operation count D of one forward pass (planner/forward_profile.py) is checked against the
aten operations a TorchDispatchMode counts on the built network; the seconds against the engine's
wall time on a cheap subset of bench/bench_time_estimate.py's odd specs (one deep, one wide), each
run in a fresh interpreter, within 5× either way at the default rates.
"""

from __future__ import annotations

import pytest
from torch.utils._python_dispatch import TorchDispatchMode

from bench.bench_time_estimate import ODD_SPECS, deep_graph, measured_seconds, prepared
from ntklab.api_schemas.spec import JobSpec
from ntklab.config.settings import Settings
from ntklab.engine.nets.network import build_network
from ntklab.engine.training.data import load_data
from ntklab.planner.estimate import FLOPS_PER_S, SECONDS_PER_OP, TimeRates, estimate_job
from ntklab.planner.forward_profile import forward_profile


class Dispatches(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


MIXTURE = {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}
PROFILED = {
    "mlp 12 × 8": {"data": MIXTURE, "model": {"hidden": [8] * 12}},
    "mlp without bias": {"data": MIXTURE, "model": {"hidden": [8] * 12, "bias": False, "activation": "gelu"}},
    "resnet": {"data": MIXTURE, "model": {"kind": "resnet", "hidden": [8] * 5, "blocks": 4}},
    "cnn": {
        "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 48},
        "model": {"kind": "cnn", "hidden": [4] * 6, "input_shape": [3, 4, 4], "padding": 1},
    },
    "deep graph": {"data": MIXTURE, "model": {"kind": "graph", "layers": deep_graph(4, 8)}},
    "graph with layer norm": {
        "data": MIXTURE,
        "model": {
            "kind": "graph",
            "layers": [{"type": "dense", "width": 8}, {"type": "layer_norm"}, {"type": "activation", "name": "relu"}]
            * 6,
        },
    },
}


@pytest.mark.parametrize("name", sorted(PROFILED))
def test_the_operations_of_a_forward_pass_are_those_torch_dispatches(name):
    spec = JobSpec.model_validate(PROFILED[name])
    data = load_data(spec)
    net = build_network(spec.model, data.input_shape, seed=0)
    with Dispatches() as forward:
        y = net(data.x_train)
    with Dispatches() as backward:
        y.sum().backward()
    planned = forward_profile(spec).ops
    assert 0.5 <= planned / forward.count <= 2, (planned, forward.count)
    assert 1.5 <= backward.count / forward.count <= 3, "a backward pass dispatches about twice a forward's"


def test_the_seconds_are_each_terms_flops_at_the_rate_plus_its_operations_at_the_cost_of_one():
    spec = JobSpec.model_validate(ODD_SPECS["hessian_spectrum with block norms"])
    slow_ops, fast_ops = TimeRates(1e10, 1e-4), TimeRates(1e10, 1e-6)
    slow, fast = estimate_job(spec, slow_ops), estimate_job(spec, fast_ops)
    flops = {term.name: term.value for term in slow.work}
    for term in slow.time:
        ops = next(o.value for o in slow.ops if o.name == term.name)
        assert term.value == pytest.approx(flops[term.name] / 1e10 + ops * 1e-4)
    assert slow.seconds == pytest.approx(slow.flops / 1e10 + slow.dispatches * 1e-4)
    assert slow.seconds - fast.seconds == pytest.approx(slow.dispatches * (1e-4 - 1e-6))
    assert slow.dispatches > 0 and slow.flops > 0


def test_a_deep_narrow_graph_trains_in_operations_a_wide_net_in_flops_and_a_wide_layer_on_few_features_in_traffic():
    """Deep and narrow: dispatches. Wide on 1024 features: FLOPs (2d per hidden unit and point), though its
    [1024, 16384] activations, over 32 MiB, already cost a fifth as much to move. Wide on 8 features (the
    paper's set-up): moving the activations and weights, ~10× its FLOPs."""

    def training(name: str) -> tuple[float, float]:
        estimate = estimate_job(JobSpec.model_validate(ODD_SPECS[name]))
        flops = next(term.value for term in estimate.work if term.name == "training")
        ops = next(term.value for term in estimate.ops if term.name == "training")
        return flops / FLOPS_PER_S, ops * SECONDS_PER_OP

    deep_flops, deep_ops = training("deep graph 2048 layers")
    wide_flops, wide_ops = training("wide mlp 16384")
    paper_flops, paper_ops = training("paper width: 10⁶ units on 8 features, 15 steps")
    assert deep_ops > 10 * deep_flops and wide_flops > 3 * wide_ops and paper_ops > 10 * paper_flops


def test_the_default_rates_are_the_settings_defaults():
    settings = Settings(_env_file=None)
    assert (settings.estimate_flops_per_s, settings.estimate_seconds_per_op) == (FLOPS_PER_S, SECONDS_PER_OP)


MEASURED = (
    "deep graph 512 layers",
    "wide mlp 8192, 512 points",
    "long training (20 000 steps, tiny)",
    "hessian_spectrum with block norms",
    "infinite width, 3 layers",
    "paper width: 10⁶ units on 8 features, 15 steps",
)


@pytest.mark.slow
@pytest.mark.parametrize("name", MEASURED)
def test_the_estimated_seconds_are_within_five_times_the_measured(name):
    doc, body = prepared(ODD_SPECS[name])
    estimate = estimate_job(JobSpec.model_validate(doc))
    seconds = measured_seconds(doc, body, threads=1, timeout=300)
    ratio = seconds / estimate.seconds
    print(f"{name}: estimated {estimate.seconds:.3g} s, measured {seconds:.3g} s (×{ratio:.2f})")
    assert 1 / 5 <= ratio <= 5, f"{name}: estimated {estimate.seconds:.3g} s, measured {seconds:.3g} s (×{ratio:.2f})"

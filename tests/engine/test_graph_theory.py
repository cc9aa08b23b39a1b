"""Liu, Zhu & Belkin (2020) beyond the paper's nets, at small scale: layer graphs with tokens,
pre-LN residual blocks, softmax self-attention and a narrow dense layer.

Set-up (shared): a two-class Gaussian mixture in 32 dimensions read as T = 4 tokens of d = 8
features (model.input_shape [4, 8]), ‖x‖²/d ≈ 0.5, NTK parameterization, no biases, a linear
head (O = 1 for the Hessian, signed targets). A stack is `dense m` (token embedding), two blocks,
a final layer_norm, global_avg_pool and the readout, where a block is

    pre-LN MLP block:          residual[layer_norm, dense m, softplus, dense m]
    pre-LN transformer block:  residual[layer_norm, self_attention(heads, width m)], then the MLP block

‖H‖ = hessian_norm at init (model_hessian: 2 probe points, 24 Lanczos steps, as run() reports
it), averaged over 3 seeds, at widths m = 64…512; slopes are numpy.polyfit on the logs. softplus
for the Hessian for the reason given in tests/engine/test_theory.py (small σ'', small log factor).

What the theory says and what is measured (docs/models.md, "Theory beyond the paper's nets"):
- LayerNorm and residual MLP blocks keep the paper's picture: every hidden unit is one of m,
  ‖H‖ = Õ(1/√m). Measured slope −0.46.
- Softmax attention adds heads·T² scalars s = q·k/√d_head that feed a non-linear map (the
  softmax) and are Θ(1)-gradient functions of the weights: q and k have O(1) entries, so
  ‖∂s/∂W_Q‖ = ‖k‖/√d_head · ‖x‖/√d = Θ(1), and ∂s/∂h = W_Qᵀk/√(m·d_head) has Θ(1) norm too, so
  every weight upstream of a score sees it. With ∂f/∂s = Θ(1) (a sum of d_head = m/heads terms
  of size 1/√m), the term (∂s/∂w)ᵀ ∂²f/∂s² (∂s/∂w) of the Hessian is Θ(1): the scores are a
  bottleneck of heads·T² units behind a non-linearity — the paper's Figure 2 mechanism. With a
  fixed number of heads ‖H‖ levels off (measured slope −0.09 over m = 128…512, ≈ 1.1 at 512).
  With d_head fixed and heads = m/d_head the number of scores grows with m and each head's
  ∂f/∂s is O(√(d_head/m)), so the bottleneck widens and ‖H‖ = Õ(1/√m) returns (measured −0.52).
- A dense layer of width 3 inside an otherwise wide graph keeps the tangent kernel moving
  during training, while the same graph with that layer as wide as the others does not.
"""

import numpy as np
import pytest

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.curvature.hessian import model_hessian
from ntklab.engine.nets.network import build_network
from ntklab.engine.run import run
from ntklab.engine.torch_threads import torch_threads
from ntklab.engine.training.data import load_data

pytestmark = pytest.mark.slow

TOKENS, FEATURES = 4, 8
DATA = {"kind": "gaussian_mixture", "input_dim": TOKENS * FEATURES, "classes": 2, "mean_scale": 0.5, "sigma": 0.5}
LN = {"type": "layer_norm"}
WIDTHS = [64, 128, 256, 512]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with torch_threads(1):
        yield


def slope(widths, values) -> float:
    return float(np.polyfit(np.log(widths), np.log(values), 1)[0])


def stack(m: int, heads: int | None) -> list[dict]:
    """dense m, two pre-LN blocks (with attention when heads is given), layer_norm, global_avg_pool."""
    mlp = {
        "type": "residual",
        "layers": [
            LN,
            {"type": "dense", "width": m},
            {"type": "activation", "name": "softplus"},
            {"type": "dense", "width": m},
        ],
    }
    attention = {"type": "residual", "layers": [LN, {"type": "self_attention", "heads": heads, "width": m}]}
    block = [mlp] if heads is None else [attention, mlp]
    return [{"type": "dense", "width": m}, *block, *block, LN, {"type": "global_avg_pool"}]


def hessian_norm_at_init(layers: list[dict], seed: int) -> float:
    spec = JobSpec.model_validate(
        {
            "seed": seed,
            "data": {**DATA, "n_train": 4, "targets": "signed"},
            "model": {"kind": "graph", "input_shape": [TOKENS, FEATURES], "layers": layers, "bias": False},
        }
    )
    data = load_data(spec)
    net = build_network(spec.model, data.input_shape, seed=seed)
    return model_hessian(net, data.x_probe[:2], iterations=24).norm


@pytest.fixture(scope="module")
def hessian_norms() -> dict[str, list[float]]:
    """Seed-averaged ‖H‖ at init per stack and width."""
    heads = {"mlp blocks": lambda m: None, "attention, 4 heads": lambda m: 4, "attention, d_head 16": lambda m: m // 16}
    return {
        name: [float(np.mean([hessian_norm_at_init(stack(m, of(m)), seed) for seed in range(3)])) for m in WIDTHS]
        for name, of in heads.items()
    }


def test_hessian_falls_like_one_over_root_width_for_pre_ln_mlp_blocks(hessian_norms):
    assert -0.6 <= slope(WIDTHS, hessian_norms["mlp blocks"]) <= -0.4, hessian_norms


def test_hessian_falls_for_transformer_blocks_when_heads_grow_with_width(hessian_norms):
    assert -0.6 <= slope(WIDTHS, hessian_norms["attention, d_head 16"]) <= -0.4, hessian_norms


def test_hessian_levels_off_for_transformer_blocks_with_a_fixed_number_of_heads(hessian_norms):
    fixed = hessian_norms["attention, 4 heads"]
    assert slope(WIDTHS[1:], fixed[1:]) > -0.2, hessian_norms
    assert fixed[-1] >= 3 * hessian_norms["mlp blocks"][-1], hessian_norms


BOTTLENECK_WIDTHS = [100, 300, 1000]


def delta_k_max(m: int, narrow: int, seed: int) -> float:
    """ΔK of [dense m, tanh, dense narrow, tanh, dense m, tanh, global_avg_pool], gd to loss 1e-3."""
    layers = [
        {"type": "dense", "width": m},
        {"type": "activation", "name": "tanh"},
        {"type": "dense", "width": narrow},
        {"type": "activation", "name": "tanh"},
        {"type": "dense", "width": m},
        {"type": "activation", "name": "tanh"},
        {"type": "global_avg_pool"},
    ]
    spec = JobSpec.model_validate(
        {
            "seed": seed,
            "data": {**DATA, "n_train": 16},
            "model": {"kind": "graph", "input_shape": [TOKENS, FEATURES], "layers": layers, "bias": False},
            "training": {"optimizer": "gd", "lr": "auto", "target_loss": 1e-3, "max_steps": 2000},
            "diagnostics": {
                "kernel": {"points": 12},
                "hessian": None,
                "weight_change": False,
                "layer_sensitivity": False,
                "linearization_error": False,
                "save_kernels": [],
                "save_weights": False,
            },
            "device": "cpu",
        }
    )
    summary = run(spec).summary
    assert summary["outcome"] == "converged", (m, narrow, seed, summary)
    return summary["delta_k_max"]


def test_a_narrow_dense_layer_keeps_the_kernel_moving_in_a_wide_graph():
    narrow = [float(np.mean([delta_k_max(m, 3, seed) for seed in range(2)])) for m in BOTTLENECK_WIDTHS]
    wide = [float(np.mean([delta_k_max(m, m, seed) for seed in range(2)])) for m in BOTTLENECK_WIDTHS]
    assert slope(BOTTLENECK_WIDTHS, wide) < -0.4, (narrow, wide)
    assert slope(BOTTLENECK_WIDTHS, narrow) > -0.15, (narrow, wide)
    assert narrow[-1] >= 5 * wide[-1], (narrow, wide)

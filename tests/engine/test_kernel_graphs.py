"""The tangent kernel of layer graphs: transformer blocks, a ViT, a VGG-like CNN, tied and foreign weights.

Small hand-built nets with the shapes of engine/nets/graph.py's networks (scaled layers
over token sequences, a patch-embedding convolution, LayerNorm with affine parameters,
softmax attention, residuals, pooling); every method must agree with a dense reference
J Jᵀ in float64 to 1e-10.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, jacrev

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.kernels import kernel_cost, kernel_rules, ntk
from ntklab.engine.kernels.layer_capture import capture
from ntklab.engine.kernels.ntk import kernel_costs, resolve_method, tangent_kernel
from ntklab.engine.kernels.per_sample import per_sample_kernel
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.base import TangentNetwork
from ntklab.engine.nets.layers import ScaledConv2d, ScaledEmbedding, ScaledLinear
from ntklab.engine.nets.network import build_network, trainable_parameters

METHODS = ("structured", "jacobian", "ntk_vp")
F64 = torch.float64


def linear(fan_in, out, bias=True):
    return ScaledLinear(fan_in, out, bias=bias, weight_multiplier=1 / math.sqrt(fan_in), dtype=F64)


class Block(nn.Module):
    """Pre-LN transformer block: h + O(attention(LN h)), then h + MLP(LN h); Q/K/V/O/MLP are ScaledLinear over [n, T, d]."""

    def __init__(self, d, heads, hidden):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d, dtype=F64), nn.LayerNorm(d, dtype=F64)
        self.q, self.k, self.v, self.o = (linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = linear(d, hidden), linear(hidden, d)

    def forward(self, h):
        n, T, d = h.shape
        u = self.ln1(h)
        q, k, v = (m(u).reshape(n, T, self.heads, -1).transpose(1, 2) for m in (self.q, self.k, self.v))
        attention = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        h = h + self.o((attention @ v).transpose(1, 2).reshape(n, T, d))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class TinyTransformer(TangentNetwork):
    """Tokens [n, T] through ScaledEmbedding (or features [n, T, d_in] through a ScaledLinear) + a learned
    positional table, one block, LayerNorm, mean over tokens, ScaledLinear readout."""

    def __init__(self, *, tokens, T=5, d=8, out=3, head="softmax", vocab=7, d_in=4):
        super().__init__(head=head, output_dim=out)
        if tokens:
            self.embed = ScaledEmbedding(vocab, d, weight_multiplier=1.0, dtype=F64)
        else:
            self.embed = linear(d_in, d)
        self.position = nn.Parameter(torch.empty(T, d, dtype=F64))
        self.block = Block(d, heads=2, hidden=12)
        self.ln = nn.LayerNorm(d, dtype=F64)
        self.readout = linear(d, out)

    def forward(self, x):
        h = self.block(self.embed(x) + self.position)
        return self.readout(self.ln(h).mean(dim=1))


class TinyViT(TangentNetwork):
    """[n, 1, 8, 8] -> 4×4 patches by a ScaledConv2d (stride 4) -> class token + 4 tokens -> block -> class token readout."""

    def __init__(self, d=8, out=3, head="tanh"):
        super().__init__(head=head, output_dim=out)
        self.patch = ScaledConv2d(1, d, 4, stride=4, padding=0, bias=True, weight_multiplier=0.25, dtype=F64)
        self.cls = nn.Parameter(torch.empty(1, 1, d, dtype=F64))
        self.block = Block(d, heads=2, hidden=12)
        self.ln = nn.LayerNorm(d, dtype=F64)
        self.readout = linear(d, out)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        h = self.block(torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1))
        return self.readout(self.ln(h[:, 0]))


class VGGLike(TangentNetwork):
    """conv-relu-conv-relu-maxpool-conv-relu-maxpool, flatten, ScaledLinear-relu-ScaledLinear; [n, 1, 8, 8]."""

    def __init__(self, out=3, head="sigmoid"):
        super().__init__(head=head, output_dim=out)

        def conv(c_in, c_out):
            return ScaledConv2d(
                c_in, c_out, 3, stride=1, padding=1, bias=True, weight_multiplier=1 / math.sqrt(9 * c_in), dtype=F64
            )

        self.convs = nn.ModuleList([conv(1, 4), conv(4, 4), conv(4, 6)])
        self.fc, self.readout = linear(6 * 2 * 2, 10), linear(10, out)

    def forward(self, x):
        h = F.relu(self.convs[1](F.relu(self.convs[0](x))))
        h = F.max_pool2d(F.relu(self.convs[2](F.max_pool2d(h, 2))), 2)
        return self.readout(F.relu(self.fc(h.flatten(1))))


class TiedAndForeign(TangentNetwork):
    """The awkward cases: one ScaledLinear called twice, one applied to the [n·T, d] reshaped batch, one whose
    output is modified in place, a plain nn.Linear, and a readout tied to the embedding table (logits = h Eᵀ)."""

    def __init__(self, vocab=5, d=6, head="swish"):
        super().__init__(head=head, output_dim=vocab)
        self.embed = ScaledEmbedding(vocab, d, weight_multiplier=1.0, dtype=F64)
        self.twice = linear(d, d)
        self.flat = linear(d, d)
        self.in_place = linear(d, d, bias=False)
        self.plain = nn.Linear(d, d, dtype=F64)

    def forward(self, tokens):
        h = self.embed(tokens)
        h = torch.tanh(self.twice(torch.tanh(self.twice(h))))
        n, T, d = h.shape
        h = torch.tanh(self.flat(h.reshape(n * T, d))).reshape(n, T, d)
        z = self.in_place(h)
        z.mul_(0.5)
        h = torch.tanh(self.plain(z)).mean(dim=1)
        return h @ self.embed.weight.T / math.sqrt(h.shape[1])


def seeded(net, seed=0):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=F64) * 0.7)
    return net


def tokens(n, T, vocab, seed=1):
    return torch.randint(vocab, (n, T), generator=torch.Generator().manual_seed(seed))


def images(n, seed=1):
    return torch.randn(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed), dtype=F64)


GRAPHS = {
    "transformer-tokens": lambda: (seeded(TinyTransformer(tokens=True)), tokens(4, 5, 7)),
    "transformer-features": lambda: (
        seeded(TinyTransformer(tokens=False, head="tanh")),
        torch.randn(4, 5, 4, generator=torch.Generator().manual_seed(1), dtype=F64),
    ),
    "vit": lambda: (seeded(TinyViT()), images(4)),
    "vgg": lambda: (seeded(VGGLike()), images(4)),
    "tied-and-foreign": lambda: (seeded(TiedAndForeign()), tokens(3, 4, 5)),
    "builtin-mlp": lambda: (
        build_network(
            model_spec(
                hidden=[16, 3, 16], activation=["tanh", "identity", "relu"], output_dim=3, output_activation="softmax"
            ),
            (5,),
            seed=1,
            dtype=F64,
        ),
        torch.randn(5, 5, dtype=F64, generator=torch.Generator().manual_seed(2)),
    ),
    "builtin-resnet-conv": lambda: (
        build_network(
            model_spec(
                kind="resnet",
                block="conv",
                hidden=[3],
                blocks=2,
                activation="tanh",
                output_dim=2,
                output_activation="tanh",
            ),
            (1, 8, 8),
            seed=1,
            dtype=F64,
        ),
        images(5),
    ),
}


def reference_kernel(net, x, of, names=None):
    """J Jᵀ, J = jacrev of w ↦ vec(φ(f(w; X))) over the named parameters (all trainable ones by default)."""
    params = {k: v for k, v in trainable_parameters(net).items() if names is None or k in names}
    keys, shapes, sizes = list(params), [p.shape for p in params.values()], [p.numel() for p in params.values()]
    w = torch.cat([p.detach().reshape(-1) for p in params.values()])

    def flat_outputs(w):
        unflat = {k: t.reshape(s) for k, t, s in zip(keys, torch.split(w, sizes), shapes)}
        logits = functional_call(net, unflat, (x,))
        return (apply_head(net.head, logits) if of == "outputs" else logits).reshape(-1)

    J = jacrev(flat_outputs)(w)
    return J @ J.T


def relative_error(K, reference):
    K, reference = K.detach().double(), reference.detach().double()
    return float(torch.linalg.norm(K - reference) / torch.linalg.norm(reference))


def outputs_of(net, of):
    return lambda logits: apply_head(net.head, logits) if of == "outputs" else logits


@pytest.mark.parametrize("of", ["outputs", "logits"])
@pytest.mark.parametrize("graph", list(GRAPHS))
def test_three_methods_agree_with_the_dense_reference_on_graphs(graph, of):
    net, x = GRAPHS[graph]()
    assert net.head != "identity"
    reference = reference_kernel(net, x, of)
    for method in METHODS:
        K = tangent_kernel(net, x, method=method, of=of)
        assert K.dtype == F64 and not K.requires_grad and K.shape == reference.shape
        assert relative_error(K, reference) < 1e-10, method
    assert relative_error(tangent_kernel(net, x, of=of), reference) < 1e-10


def test_rules_cover_the_scaled_layers_and_only_the_rest_falls_back():
    net, x = GRAPHS["transformer-tokens"]()
    captured = capture(net, x, outputs_of(net, "outputs"))
    assert captured.fallback == []
    assert [[name for name, _, _ in use.parts] for use in captured.direct] == [
        ["position"],
        ["block.ln1.weight", "block.ln1.bias"],
        ["block.ln2.weight", "block.ln2.bias"],
        ["ln.weight", "ln.bias"],
    ]
    vgg, images_ = GRAPHS["vgg"]()
    assert capture(vgg, images_, outputs_of(vgg, "outputs")).fallback == []


def test_tied_reshaped_in_place_and_functionally_used_weights_fall_back_and_a_layer_called_twice_does_not():
    net, x = GRAPHS["tied-and-foreign"]()
    captured = capture(net, x, outputs_of(net, "outputs"))
    assert captured.fallback == [
        "embed.weight",
        "flat.weight",
        "flat.bias",
        "in_place.weight",
        "plain.weight",
        "plain.bias",
    ]
    assert list(captured.layers) == [net.twice]
    assert len(captured.layers[net.twice].outputs) == 2


def test_a_frozen_parameter_is_neither_covered_nor_a_fallback():
    net, x = GRAPHS["transformer-tokens"]()
    net.block.ln1.requires_grad_(False)
    net.block.q.weight.requires_grad_(False)
    captured = capture(net, x, outputs_of(net, "outputs"))
    assert "block.ln1.weight" not in captured.fallback and "block.q.weight" not in captured.fallback
    assert captured.layers[net.block.q].weight is False and captured.layers[net.block.q].bias is True
    reference = reference_kernel(net, x, "outputs")
    assert relative_error(tangent_kernel(net, x, method="structured"), reference) < 1e-10


@pytest.mark.parametrize("graph", ["transformer-tokens", "vit"])
def test_fallback_alone_equals_the_jacobian_kernel_restricted_to_its_parameters(graph):
    net, x = GRAPHS[graph]()
    names = [name for name in trainable_parameters(net) if ".ln" in name or name.startswith("ln.")]
    assert len(names) >= 4
    K = per_sample_kernel(net, x, outputs_of(net, "outputs"), names, budget=ntk.MEMORY_BUDGET_BYTES)
    assert relative_error(K, reference_kernel(net, x, "outputs", names)) < 1e-10
    everything = list(trainable_parameters(net))
    K_all = per_sample_kernel(net, x, outputs_of(net, "logits"), everything, budget=ntk.MEMORY_BUDGET_BYTES)
    assert relative_error(K_all, reference_kernel(net, x, "logits")) < 1e-10


def test_a_scaled_layer_treated_as_unknown_falls_back_to_the_same_kernel(monkeypatch):
    net, x = GRAPHS["transformer-features"]()
    with_rules = tangent_kernel(net, x, method="structured")
    monkeypatch.setattr(kernel_rules, "RULE_LAYERS", (ScaledConv2d, ScaledEmbedding))
    captured = capture(net, x, outputs_of(net, "outputs"))
    assert captured.layers == {} and "block.q.weight" in captured.fallback
    without = tangent_kernel(net, x, method="structured")
    assert relative_error(without, with_rules) < 1e-12
    assert relative_error(without, reference_kernel(net, x, "outputs")) < 1e-10


@pytest.mark.parametrize("per_sample", [True, False])
@pytest.mark.parametrize("graph", ["transformer-tokens", "vit", "vgg", "tied-and-foreign"])
def test_per_sample_and_position_sum_rules_give_the_same_kernel(graph, per_sample, monkeypatch):
    net, x = GRAPHS[graph]()
    reference = reference_kernel(net, x, "logits")
    chosen = []
    monkeypatch.setattr(kernel_rules, "use_per_sample", lambda *args: chosen.append(per_sample) or per_sample)
    assert relative_error(tangent_kernel(net, x, method="structured", of="logits"), reference) < 1e-10
    assert chosen


@pytest.mark.parametrize("budget", [1, 3000, 60_000])
@pytest.mark.parametrize("graph", ["transformer-tokens", "vit", "vgg", "tied-and-foreign"])
def test_a_tiny_memory_budget_chunks_to_the_same_kernel(graph, budget, monkeypatch):
    net, x = GRAPHS[graph]()
    unchunked = tangent_kernel(net, x, method="structured")
    monkeypatch.setattr(ntk, "MEMORY_BUDGET_BYTES", budget)
    assert relative_error(tangent_kernel(net, x, method="structured"), unchunked) < 1e-12


def test_fallback_panels_and_chunks_reproduce_the_one_block_kernel():
    net, x = GRAPHS["vit"]()
    x = torch.cat([x, images(3, seed=5)])
    names = list(trainable_parameters(net))
    outputs = outputs_of(net, "outputs")
    whole = per_sample_kernel(net, x, outputs, names, budget=2**30)
    p = sum(t.numel() for t in trainable_parameters(net).values())
    for budget in (1, 2 * 3 * p * 8 * 2, 2 * 3 * p * 8 * 3 + 1):  # panels of 1, 2 and 3 points of 7
        assert relative_error(per_sample_kernel(net, x, outputs, names, budget=budget), whole) < 1e-12


def test_embedding_rule_scatters_into_the_used_rows_only():
    layer = ScaledEmbedding(10**6, 3, weight_multiplier=0.5, dtype=F64)
    tok = torch.tensor([[5, 999_999, 5], [7, 5, 7]])
    G = torch.randn(2, 2, 3, 3, dtype=F64)
    K = kernel_rules.layer_kernel(layer, [tok], [G], weight=True, bias=False, budget=2**20)
    same = (tok[:, None, :, None] == tok[None, :, None, :]).to(F64)
    expected = 0.25 * torch.einsum("ijtu,iatc,jbuc->iajb", same, G, G).reshape(4, 4)
    assert torch.allclose(K, expected, rtol=1e-13, atol=0)


def test_float32_structured_and_auto_agree_with_float64_to_1e_5():
    net, x = GRAPHS["transformer-tokens"]()
    reference = reference_kernel(net, x, "outputs")
    net32 = net.float()
    for method in ("structured", "auto"):
        K = tangent_kernel(net32, x, method=method)
        assert K.dtype == torch.float32
        assert relative_error(K, reference) < 1e-5


# --------------------------------------------------------------------------- auto's cost model


def chosen_by_the_formulas(costs, budget):
    fitting = {m: c for m, c in costs.items() if c.memory <= budget}
    return min(fitting, key=lambda m: fitting[m].flops) if fitting else min(costs, key=lambda m: costs[m].memory)


def test_cost_model_picks_structured_for_a_wide_mlp():
    net = build_network(model_spec(hidden=[4096], activation="relu", output_dim=1), (100,), seed=0)
    x = torch.randn(64, 100)
    costs = kernel_costs(net, x)
    prof = kernel_cost.profile(net, x, outputs_of(net, "outputs"))
    assert prof.p == 100 * 4096 + 4096 + 4096 + 1 and prof.p_fallback == 0
    assert [layer.kind for layer in prof.layers] == ["dense", "dense"]
    n, O, F = 64, 1, prof.forward_flops
    assert costs["jacobian"].flops == n * F * (1 + 2 * O) + 2 * (n * O) ** 2 * prof.p
    assert costs["jacobian"].memory == 4 * n * O * prof.p + n * (1 + O) * prof.saved_bytes
    assert costs["structured"].flops < costs["jacobian"].flops / 10 and costs["jacobian"].flops < costs["ntk_vp"].flops
    assert resolve_method(net, "auto", x) == chosen_by_the_formulas(costs, ntk.MEMORY_BUDGET_BYTES) == "structured"


def test_auto_picks_structured_for_the_built_in_networks():
    for fields, shape in [
        (dict(hidden=[16, 16], activation="tanh", output_dim=3, output_activation="softmax"), (5,)),
        (dict(kind="cnn", hidden=[8, 8], activation="relu", output_dim=10), (1, 8, 8)),
        (dict(kind="resnet", block="conv", hidden=[4], blocks=2, output_dim=2), (1, 8, 8)),
        (dict(kind="resnet", hidden=[32], blocks=3, output_dim=2, train_output_layer=False), (5,)),
    ]:
        net = build_network(model_spec(**fields), shape, seed=0)
        x = torch.randn(64, *shape)
        assert resolve_method(net, "auto", x) == "structured", fields
        assert resolve_method(net, "auto") == "structured"


class DenseFallback(TangentNetwork):
    """ScaledLinear(8, 64) -> tanh -> nn.Linear(64, 64) (no rule: 4160 of the 4931 parameters) -> tanh -> ScaledLinear(64, 3)."""

    def __init__(self):
        super().__init__(head="identity", output_dim=3)
        self.first, self.plain, self.readout = linear(8, 64), nn.Linear(64, 64, dtype=F64), linear(64, 3)

    def forward(self, x):
        return self.readout(torch.tanh(self.plain(torch.tanh(self.first(x)))))


class ConvFallback(TangentNetwork):
    """ScaledConv2d(1, 4) -> relu -> nn.Conv2d(4, 16) (no rule: 592 of the 683 parameters) -> relu -> mean -> ScaledLinear."""

    def __init__(self):
        super().__init__(head="identity", output_dim=3)
        self.first = ScaledConv2d(1, 4, 3, stride=1, padding=1, bias=True, weight_multiplier=1 / 3, dtype=F64)
        self.plain = nn.Conv2d(4, 16, 3, padding=1, dtype=F64)
        self.readout = linear(16, 3)

    def forward(self, x):
        return self.readout(torch.relu(self.plain(torch.relu(self.first(x)))).mean(dim=(2, 3)))


def test_cost_model_on_nets_dominated_by_fallback_parameters(monkeypatch):
    budget = ntk.MEMORY_BUDGET_BYTES
    # dense: the Gram term 2(nO)²·p dominates; structured pays it for the 4160 fallback parameters only
    # (its extra per-sample passes, 2·n·F·(1+2O)-ish, are small): structured
    dense, x_dense = seeded(DenseFallback()), torch.randn(32, 8, dtype=F64)
    costs = kernel_costs(dense, x_dense)
    assert kernel_cost.profile(dense, x_dense, outputs_of(dense, "outputs")).p_fallback == 4160
    assert costs["structured"].flops < costs["jacobian"].flops < costs["ntk_vp"].flops
    assert resolve_method(dense, "auto", x_dense) == chosen_by_the_formulas(costs, budget) == "structured"
    # convolution over 64 positions: passes (F ≈ 2·64·p per point) dominate, and structured runs them twice
    # (its O backward passes, then the fallback's per-sample gradients): jacobian, whose memory fits
    conv, x_conv = seeded(ConvFallback()), images(32)
    costs = kernel_costs(conv, x_conv)
    assert costs["jacobian"].flops < costs["structured"].flops < costs["ntk_vp"].flops
    assert costs["jacobian"].memory < budget
    assert resolve_method(conv, "auto", x_conv) == chosen_by_the_formulas(costs, budget) == "jacobian"
    assert resolve_method(conv, "auto") == "jacobian"
    # a budget the whole Jacobian exceeds but structured's activations and cotangents fit: structured, chunked
    tight = int(costs["jacobian"].memory) - 1
    assert costs["structured"].memory <= tight
    monkeypatch.setattr(ntk, "MEMORY_BUDGET_BYTES", tight)
    assert resolve_method(conv, "auto", x_conv) == chosen_by_the_formulas(kernel_costs(conv, x_conv), tight)
    assert resolve_method(conv, "auto", x_conv) == "structured"
    assert relative_error(tangent_kernel(conv, x_conv), reference_kernel(conv, x_conv, "outputs")) < 1e-10
    # a budget nothing fits: the least memory
    monkeypatch.setattr(ntk, "MEMORY_BUDGET_BYTES", 1)
    least = chosen_by_the_formulas(kernel_costs(conv, x_conv), 1)
    assert resolve_method(conv, "auto", x_conv) == least == "structured"


def test_every_method_is_accepted_for_any_network_and_unknown_names_are_refused():
    net, x = GRAPHS["tied-and-foreign"]()
    for method in METHODS:
        assert resolve_method(net, method) == method
    with pytest.raises(ValueError, match="unknown kernel method"):
        resolve_method(net, "magic")
    with pytest.raises(ValueError, match="of must be"):
        tangent_kernel(net, x, of="probabilities")

import pytest
import torch

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.diagnostics.sensitivity import layer_sensitivity
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network


def direct_sensitivity(net, x, of):
    """max over (i, a) of ‖∂y_a(x_i)/∂α^(l)‖ from a fresh forward pass per point, one autograd call per output."""
    layers = len(net.stages)
    linf, l2 = [0.0] * layers, [0.0] * layers
    for i in range(x.shape[0]):
        logits, hidden = net.forward_with_hidden(x[i : i + 1])
        y = apply_head(net.head, logits) if of == "outputs" else logits
        for a in range(y.shape[1]):
            grads = torch.autograd.grad(y[0, a], hidden, retain_graph=True)
            for l, g in enumerate(grads):
                linf[l] = max(linf[l], g.abs().max().item())
                l2[l] = max(l2[l], g.norm().item())
    return linf, l2


@pytest.mark.parametrize(
    "fields,shape",
    [
        (
            dict(
                hidden=[12, 3, 12], activation=["tanh", "identity", "relu"], output_dim=3, output_activation="softmax"
            ),
            (4,),
        ),
        (dict(kind="cnn", hidden=[3, 2], output_dim=2, output_activation="swish"), (1, 6, 6)),
        (dict(kind="resnet", hidden=[6], blocks=2, output_dim=2), (3,)),
    ],
)
@pytest.mark.parametrize("of", ["outputs", "logits"])
def test_layer_sensitivity_matches_direct_autograd(fields, shape, of):
    net = build_network(model_spec(**fields), shape, seed=0, dtype=torch.float64)
    x = torch.randn(4, *shape, dtype=torch.float64)
    report = layer_sensitivity(net, x, of=of)
    linf, l2 = direct_sensitivity(net, x, of)
    assert [s.layer for s in report] == list(range(1, len(net.stages) + 1))
    assert [s.linf for s in report] == pytest.approx(linf, rel=1e-12)
    assert [s.l2 for s in report] == pytest.approx(l2, rel=1e-12)


def test_bottleneck_layer_keeps_a_dominant_unit_while_wide_layers_do_not():
    net = build_network(
        model_spec(hidden=[4000, 2, 4000], activation=["tanh", "identity", "tanh"], output_dim=1),
        (3,),
        seed=0,
        dtype=torch.float64,
    )
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    wide_first, bottleneck, wide_last = layer_sensitivity(net, x)
    # O(1) against O(1/√m): over 40 input seeds the ratio was 7.5 to 10 at m = 4000 (it was an
    # unseeded draw against a factor 10, so the test failed on about 4 inputs in 10)
    assert bottleneck.linf > 5 * max(wide_first.linf, wide_last.linf)
    assert wide_last.linf < 5 / 4000**0.5

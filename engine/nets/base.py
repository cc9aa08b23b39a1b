"""The network interface of the engine: what every network it builds is, and what the diagnostics read of one.

    net(x)                      logits f(w; x) [n, O], x [n, …] one point's shape as the data's
    net.outputs(x)              φ(f(w; x)) [n, O], φ the head (activations.apply_head)
    net.forward_with_hidden(x)  the logits and the hidden representations α^(1..L) (layer sensitivity)
    net.head                    φ by name; net.output_dim: O
    net.kind                    mlp | cnn | resnet | graph | onnx, the spec's kind it was built from
    net.parameterization        ntk | standard | meanfield (| mup for onnx), what its weights were drawn or rescaled for
    net.saved_parameters()      the parameters under the names a weights artifact holds them by

Two networks derive from it: a layer graph (engine/nets/graph.py; an mlp, cnn or resnet is one)
and an uploaded ONNX model (engine/nets/onnx_model.py). The kernels, the curvature operators and
layer sensitivity also take any other torch module (tests/engine/test_any_module.py): its outputs
are its logits (head "identity"), its hidden layers what sensitivity.hidden_representations finds;
they ask isinstance(net, TangentNetwork), never which attributes a module has.
"""

from __future__ import annotations

from torch import Tensor, nn

from ntklab.engine.nets.activations import apply_head


class TangentNetwork(nn.Module):
    """f(w; x) ∈ R^O (a subclass's forward) with a named head φ, its hidden representations, and the kind and
    parameterization of the spec it was built from ("module" and None for a network written by hand)."""

    def __init__(
        self, *, head: str, output_dim: int, kind: str = "module", parameterization: str | None = None
    ) -> None:
        super().__init__()
        self.head = head
        self.output_dim = output_dim
        self.kind = kind
        self.parameterization = parameterization

    def outputs(self, x: Tensor) -> Tensor:
        """φ(f(w; x)), [n, O]."""
        return apply_head(self.head, self(x))

    def forward_with_hidden(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Logits [n, O] and the hidden representations α^(1..L), each [n, …], in the order computed; a network
        that does not name them has the outputs of its parameter-free leaf modules (leaf_representations)."""
        return leaf_representations(self, x)

    def saved_parameters(self) -> dict[str, Tensor]:
        """The parameters (or views of them) a weights artifact holds, by the names it holds them under."""
        return dict(self.named_parameters())


def head_of(net: nn.Module) -> str:
    """The head φ of a network by name: a TangentNetwork's, "identity" for any other module (its outputs are its
    logits)."""
    return net.head if isinstance(net, TangentNetwork) else "identity"


def leaf_representations(net: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """(logits [n, O], [α^(1), …, α^(L)]) from one forward pass with grad: the outputs of the parameter-free leaf
    modules (the activations: nn.Tanh, nn.ReLU, …) called between the first and the last module with parameters,
    in call order; nn.Sequential(Linear, Tanh, Linear, Tanh, Linear) has two."""
    calls: list[tuple[bool, object]] = []
    leaves = [module for module in net.modules() if next(module.children(), None) is None]
    hooks = [
        leaf.register_forward_hook(lambda module, inputs, output: calls.append((_has_parameters(module), output)))
        for leaf in leaves
    ]
    try:
        logits = net(x)
    finally:
        for hook in hooks:
            hook.remove()
    weighted = [index for index, (has_parameters, _) in enumerate(calls) if has_parameters]
    if not weighted:
        return logits, []
    between = calls[weighted[0] + 1 : weighted[-1]]
    return logits, [output for has_parameters, output in between if not has_parameters and isinstance(output, Tensor)]


def _has_parameters(module: nn.Module) -> bool:
    return next(module.parameters(recurse=False), None) is not None

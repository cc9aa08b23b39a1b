"""One pass per scheduled step: the outputs' kernel from the logits' one, one shared forward pass.

References: the outputs' kernel by the jacobian method (vmap of jacrev through the head) in
float64, and the linearization error with its own forward pass.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.modules.module import register_module_forward_pre_hook

from ntklab.api_schemas.spec import JobSpec, model_spec
from ntklab.engine.diagnostics.linearization import linearization_errors
from ntklab.engine.kernels.ntk import outputs_kernel, tangent_kernel
from ntklab.engine.nets.graph import GraphNetwork
from ntklab.engine.nets.network import build_network, trainable_parameters
from ntklab.engine.run import run

NETS = [
    (dict(hidden=[16, 12], activation="tanh", output_dim=3), (5,)),
    (dict(kind="cnn", hidden=[3, 4], output_dim=4, readout="flatten"), (1, 6, 6)),
    (dict(kind="resnet", block="conv", hidden=[4], blocks=2, output_dim=3), (1, 6, 6)),
]


@pytest.mark.parametrize("fields,shape", NETS)
@pytest.mark.parametrize("head", ["swish", "softmax", "sigmoid", "tanh"])
def test_outputs_kernel_by_the_chain_rule_equals_the_direct_one(fields, shape, head):
    net = build_network(model_spec(**fields, output_activation=head), shape, seed=3, dtype=torch.float64)
    x = torch.randn(5, *shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = net(x)
    direct = tangent_kernel(net, x, method="jacobian", of="outputs")
    from_logits = outputs_kernel(tangent_kernel(net, x, method="structured", of="logits"), logits, head)
    torch.testing.assert_close(from_logits, direct, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(direct, tangent_kernel(net, x, method="jacobian", of="logits"))


def test_linearization_error_with_the_shared_logits_is_the_same_number():
    net = build_network(
        model_spec(hidden=[32], output_activation="swish", output_dim=2), (4,), seed=0, dtype=torch.float64
    )
    x = torch.randn(6, 4, dtype=torch.float64)
    w0 = {name: p.detach().clone() for name, p in trainable_parameters(net).items()}
    with torch.no_grad():
        for p in trainable_parameters(net).values():
            p.add_(0.05 * torch.randn_like(p))
        logits = net(x)
    w = trainable_parameters(net)
    assert linearization_errors(net, x, w0, w, logits=logits) == linearization_errors(net, x, w0, w)


def probe_forward_passes(head: str) -> dict[int, int]:
    """Forward passes of the network on its 6 probe points (12 training points) per step, counted by a global
    forward pre-hook; a step's diagnostics run after its loss is recorded, which sets `step`."""
    spec = JobSpec.model_validate(
        {
            "seed": 0,
            "data": {"kind": "gaussian_mixture", "n_train": 12, "input_dim": 4, "classes": 2, "probe": {"n": 6}},
            "model": {"hidden": [16], "output_activation": head},
            "training": {"max_steps": 8, "target_loss": None},
            "diagnostics": {"kernel": {"schedule": "every", "every": 4}, "hessian": None, "layer_sensitivity": False},
            "device": "cpu",
        }
    )
    calls: dict[int, int] = {}

    class Steps:
        step = -1

        def progress(self, progress):
            pass

        def metric(self, name, step, value):
            self.step = step

        def cancelled(self):
            return False

    steps = Steps()

    def count(module, args):
        if isinstance(module, GraphNetwork) and args[0].shape[0] == 6:
            calls[steps.step] = calls.get(steps.step, 0) + 1

    hook = register_module_forward_pre_hook(count)
    try:
        run(spec, steps)
    finally:
        hook.remove()
    return calls


@pytest.mark.parametrize("head", ["identity", "swish"])
def test_a_scheduled_step_makes_one_kernel_pass_one_forward_and_one_jvp(head):
    calls = probe_forward_passes(head)
    # after step 0 (kernel at w₀ already measured): the kernel's own forward, the shared forward, the Taylor model's JVP
    assert calls[4] == 3, calls

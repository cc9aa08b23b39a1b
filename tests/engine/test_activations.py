"""The hidden tanh: float32 on the CPU through 2σ(2z) − 1, checked against float64 torch.tanh.

Values to 2.4e-7 absolute (two float32 ulps of 1) on z from −20 to 20, including the
subnormal-to-tiny range where tanh z ≈ z; its first and second derivatives by autograd against
the closed forms 1 − t² and −2t(1 − t²) in float64; float64 inputs go through torch.tanh bit for bit.
"""

from __future__ import annotations

import torch

from ntklab.engine.nets.activations import HIDDEN_ACTIVATIONS, tanh


def grid(dtype: torch.dtype) -> torch.Tensor:
    magnitudes = torch.cat(
        [torch.logspace(-30, 0, 4001, dtype=torch.float64), torch.linspace(1, 20, 4001, dtype=torch.float64)]
    )
    return torch.cat([-magnitudes.flip(0), torch.zeros(1, dtype=torch.float64), magnitudes]).to(dtype)


def test_the_hidden_tanh_is_this_function():
    assert HIDDEN_ACTIVATIONS["tanh"] is tanh


def test_float32_values_are_within_two_ulps_of_one_of_float64_tanh():
    z = grid(torch.float32)
    error = (tanh(z).double() - torch.tanh(z.double())).abs()
    assert error.max().item() <= 2.4e-7
    assert tanh(torch.zeros(3)).eq(0).all()
    assert tanh(torch.tensor([-40.0, 40.0])).tolist() == [-1.0, 1.0]


def test_float32_first_and_second_derivatives_match_the_closed_forms():
    z = grid(torch.float32).requires_grad_(True)
    (first,) = torch.autograd.grad(tanh(z).sum(), z, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), z)
    t = torch.tanh(z.detach().double())
    torch.testing.assert_close(first.double(), 1 - t**2, rtol=0, atol=5e-7)
    torch.testing.assert_close(second.double(), -2 * t * (1 - t**2), rtol=0, atol=2e-6)


def test_float64_is_torch_tanh_exactly():
    z = grid(torch.float64)
    assert torch.equal(tanh(z), torch.tanh(z))

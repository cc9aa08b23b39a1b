"""Linear and convolutional layers that hold raw weights and a constant multiplier.

    ScaledLinear:     z = c · x Wᵀ + β · b,        x [n, ..., in],     W [out, in],  b [out]
    ScaledConv2d:     z = c · (W ⋆ x) + β · b,     x [n, C, H, W],    W [C', C, k, k]
    ScaledEmbedding:  z = c · E[t],                t [n, T] integers,  E [vocab, width]

The parameterization lives in the multipliers (c = 1/√fan_in for the NTK
parameterization, 1 for the standard one, 1/fan_in for a mean-field readout; β = 1),
so the structured tangent kernel reads the scale from the layer: with G = ∂f/∂z,
∂f/∂W = c · Gᵀ x and ∂f/∂b = β · G (summed over positions when x has some), and for an
embedding ∂f/∂E[v] = c · Σ_{t: t_t = v} G_t.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from api_schemas.architecture import conv_output_size


class ScaledLinear(nn.Module):
    """z = c · x Wᵀ + β · b with raw parameters W [out, in] and b [out]."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool,
        weight_multiplier: float,
        bias_multiplier: float = 1.0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight_multiplier = float(weight_multiplier)
        self.bias_multiplier = float(bias_multiplier)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype, device=device)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        z = F.linear(x, self.weight) * self.weight_multiplier
        if self.bias is not None:
            z = z + self.bias_multiplier * self.bias
        return z

    def extra_repr(self) -> str:
        return (
            f"in={self.in_features}, out={self.out_features}, bias={self.bias is not None}, "
            f"c={self.weight_multiplier:.4g}, β={self.bias_multiplier:.4g}"
        )


class ScaledConv2d(nn.Module):
    """z = c · conv2d(x, W, stride, padding) + β · b with raw W [C', C, k, k] and b [C']."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        stride: int,
        padding: int,
        bias: bool,
        weight_multiplier: float,
        bias_multiplier: float = 1.0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.weight_multiplier = float(weight_multiplier)
        self.bias_multiplier = float(bias_multiplier)
        shape = (out_channels, in_channels, kernel_size, kernel_size)
        self.weight = nn.Parameter(torch.empty(shape, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.empty(out_channels, dtype=dtype, device=device)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        z = F.conv2d(x, self.weight, stride=self.stride, padding=self.padding) * self.weight_multiplier
        if self.bias is not None:
            z = z + self.bias_multiplier * self.bias[:, None, None]
        return z

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """Spatial size (H', W') of the output for an input of size (H, W)."""
        return conv_output_size(height, self.kernel_size, self.stride, self.padding), conv_output_size(
            width, self.kernel_size, self.stride, self.padding
        )

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}->{self.out_channels}, k={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, bias={self.bias is not None}, c={self.weight_multiplier:.4g}"
        )


class ScaledEmbedding(nn.Module):
    """z = c · E[t] for integer tokens t [n, T] (values in [0, vocab)), raw table E [vocab, width] -> z [n, T, width]."""

    def __init__(
        self,
        vocab: int,
        width: int,
        *,
        weight_multiplier: float,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        self.vocab = vocab
        self.width = width
        self.weight_multiplier = float(weight_multiplier)
        self.weight = nn.Parameter(torch.empty(vocab, width, dtype=dtype, device=device))

    def forward(self, tokens: Tensor) -> Tensor:
        return F.embedding(tokens.long(), self.weight) * self.weight_multiplier

    def extra_repr(self) -> str:
        return f"vocab={self.vocab}, width={self.width}, c={self.weight_multiplier:.4g}"


SCALED_LAYERS = (ScaledLinear, ScaledConv2d)

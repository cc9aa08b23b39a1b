"""Linear and convolutional layers that hold raw weights and a constant multiplier.

    ScaledLinear:     z = c · x Wᵀ + β · b,        x [n, ..., in],     W [out, in],  b [out]
    ScaledConv2d:     z = c · (W ⋆ x) + β · b,     x [n, C, H, W],    W [C', C/groups, kh, kw]
    ScaledConv1d:     z = c · (W ⋆ x) + β · b,     x [n, C, L],       W [C', C/groups, k]
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
    """z = c · conv2d(x, W, stride, padding, dilation, groups) + β · b with raw W [C', C/groups, kh, kw] and b [C'].

    kernel_size, stride and dilation are an int or a pair (h, w); padding is an int, a pair
    (h, w) padded on both sides, a 4-tuple (top, left, bottom, right) in ONNX's order of
    begins then ends (asymmetric pads are applied with F.pad before the convolution), or
    "same_upper" / "same_lower" (ONNX auto_pad: pads worked out from the input's size so that
    the output is ⌈size / stride⌉, the odd one at the end / the beginning). Zero padding.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        *,
        stride: int | tuple[int, int],
        padding: int | str | tuple[int, ...],
        bias: bool,
        weight_multiplier: float,
        bias_multiplier: float = 1.0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"channels {in_channels} -> {out_channels} are not divisible by groups={groups}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.groups = groups
        self.kernel_hw, self.stride_hw, self.dilation_hw = _pair(kernel_size), _pair(stride), _pair(dilation)
        self._pads = _pads_of(padding)
        self.weight_multiplier = float(weight_multiplier)
        self.bias_multiplier = float(bias_multiplier)
        self.weight = nn.Parameter(torch.empty(self._weight_shape(), dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.empty(out_channels, dtype=dtype, device=device)) if bias else None

    @property
    def fan_in(self) -> int:
        """Inputs of one output unit: C/groups · kh · kw."""
        return self.in_channels // self.groups * self.kernel_hw[0] * self.kernel_hw[1]

    def forward(self, x: Tensor) -> Tensor:
        x, padding = self._padded(self._as_2d(x))
        z = (
            F.conv2d(
                x,
                self._weight_2d(),
                stride=self.stride_hw,
                padding=padding,
                dilation=self.dilation_hw,
                groups=self.groups,
            )
            * self.weight_multiplier
        )
        if self.bias is not None:
            z = z + self.bias_multiplier * self.bias[:, None, None]
        return self._from_2d(z)

    def patches(self, x: Tensor) -> Tensor:
        """[n, T, C·kh·kw]: the input under each of the T output positions (row-major), in the order of W.reshape(C', -1)
        within each group (channels of group g at columns g·(C/groups)·kh·kw onwards)."""
        return self.columns(x).transpose(1, 2)

    def columns(self, x: Tensor) -> Tensor:
        """[n, C·kh·kw, T]: patches() before its transpose (F.unfold's layout)."""
        x, padding = self._padded(self._as_2d(x))
        return F.unfold(x, self.kernel_hw, dilation=self.dilation_hw, padding=padding, stride=self.stride_hw)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """Spatial size (H', W') of the output for an input of size (H, W)."""
        begin, end = self._spatial_pads((height, width))
        return tuple(  # type: ignore[return-value]
            (size + b + e - d * (k - 1) - 1) // s + 1
            for size, b, e, k, s, d in zip(
                (height, width), begin, end, self.kernel_hw, self.stride_hw, self.dilation_hw
            )
        )

    def extra_repr(self) -> str:
        extra = (f", dilation={self.dilation}" if self.dilation_hw != (1, 1) else "") + (
            f", groups={self.groups}" if self.groups != 1 else ""
        )
        return (
            f"{self.in_channels}->{self.out_channels}, k={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}{extra}, bias={self.bias is not None}, c={self.weight_multiplier:.4g}"
        )

    # ---- geometry (a 1-D convolution runs as a 2-D one of height 1: ScaledConv1d)

    def _weight_shape(self) -> tuple[int, ...]:
        return (self.out_channels, self.in_channels // self.groups, *self.kernel_hw)

    def _weight_2d(self) -> Tensor:
        return self.weight

    def _as_2d(self, x: Tensor) -> Tensor:
        return x

    def _from_2d(self, z: Tensor) -> Tensor:
        return z

    def _spatial_pads(self, size: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
        """((begin_h, begin_w), (end_h, end_w)) for an input of spatial size (H, W)."""
        if not isinstance(self._pads, str):
            return self._pads
        begin, end = [], []
        for length, k, s, d in zip(size, self.kernel_hw, self.stride_hw, self.dilation_hw):
            total = max(0, (-(-length // s) - 1) * s + (k - 1) * d + 1 - length)
            first = total // 2 if self._pads == "same_upper" else total - total // 2
            begin.append(first)
            end.append(total - first)
        return (begin[0], begin[1]), (end[0], end[1])

    def _padded(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """x, and the symmetric padding left for the convolution (asymmetric pads are applied here with F.pad)."""
        begin, end = self._spatial_pads((x.shape[-2], x.shape[-1]))
        if begin == end:
            return x, begin
        return F.pad(x, (begin[1], end[1], begin[0], end[0])), (0, 0)


class ScaledConv1d(ScaledConv2d):
    """z = c · conv1d(x, W, stride, padding, dilation, groups) + β · b, x [n, C, L], raw W [C', C/groups, k], b [C'].

    Runs as a ScaledConv2d of height 1 (kernel (1, k)); padding is an int, a pair (begin, end)
    or "same_upper" / "same_lower"."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        stride: int,
        padding: int | str | tuple[int, int],
        bias: bool,
        weight_multiplier: float,
        bias_multiplier: float = 1.0,
        dilation: int = 1,
        groups: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        pads = (
            padding
            if isinstance(padding, str)
            else (0, padding)
            if isinstance(padding, int)
            else (0, padding[0], 0, padding[1])
        )
        super().__init__(
            in_channels,
            out_channels,
            (1, kernel_size),
            stride=(1, stride),
            padding=pads,
            bias=bias,
            weight_multiplier=weight_multiplier,
            bias_multiplier=bias_multiplier,
            dilation=(1, dilation),
            groups=groups,
            dtype=dtype,
            device=device,
        )
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation

    def output_size(self, length: int) -> int:  # type: ignore[override]
        """Length L' of the output for an input of length L."""
        return super().output_size(1, length)[1]

    def _weight_shape(self) -> tuple[int, ...]:
        return (self.out_channels, self.in_channels // self.groups, self.kernel_hw[1])

    def _weight_2d(self) -> Tensor:
        return self.weight.unsqueeze(2)

    def _as_2d(self, x: Tensor) -> Tensor:
        return x.unsqueeze(-2)

    def _from_2d(self, z: Tensor) -> Tensor:
        return z.squeeze(-2)


def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    return (int(value), int(value)) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _pads_of(padding: int | str | tuple[int, ...]) -> str | tuple[tuple[int, int], tuple[int, int]]:
    """ "same_upper" / "same_lower", or ((begin_h, begin_w), (end_h, end_w))."""
    if isinstance(padding, str):
        if padding not in ("same_upper", "same_lower"):
            raise ValueError(f"padding {padding!r}: expected an int, a tuple, 'same_upper' or 'same_lower'")
        return padding
    if isinstance(padding, int):
        return (padding, padding), (padding, padding)
    if len(padding) == 2:
        return (int(padding[0]), int(padding[1])), (int(padding[0]), int(padding[1]))
    if len(padding) == 4:
        return (int(padding[0]), int(padding[1])), (int(padding[2]), int(padding[3]))
    raise ValueError(f"padding {padding!r}: expected 1, 2 or 4 numbers")


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


SCALED_LAYERS = (ScaledLinear, ScaledConv2d, ScaledConv1d)

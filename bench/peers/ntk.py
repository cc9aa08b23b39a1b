"""Tangent-kernel rows: ntklab (auto and structured) against nngeometry and neural-tangents, same weights and data.

The empirical NTK of the logits, K [n·O, n·O] (row i·O + a), on issue 29's networks:

    MLP 64-1024³-O tanh, n = 256, O = 1 and 10   Gaussian inputs, standard parameterization
    CNN 3×conv32 (3×3, same padding) relu, GAP, O = 10, n = 128   digits 8×8, standard parameterization
    ViT block (bench_graph_kernels.ViT, one block), O = 10, n = 64   digits 8×8, NTK parameterization

then the infinite-width row (bench/peers/infinite_cnn.py). Peers: nngeometry's GramMatrix on
nn_copies.py's torch.nn copy (the same function; the same kernel where c = 1, hence the standard
parameterization of the MLP and CNN); neural-tangents' structured-derivatives empirical NTK on
nt_export.py's port of the same weights (stax layers, or vit_function.py for the ViT) in a
.venv-jax subprocess (nt_client.py). Every network is drawn once in float64 and cast, so the
float32 timings and the float64 agreement see the same weights on every side. Timing: float32,
interleaved (harness.py), `threads` for torch and for XLA. Agreement: max |K − K_auto| / max
|K_auto| in float64 of ntklab's structured method, nngeometry and neural-tangents. nngeometry
0.4's generic per-layer rule (JacobianFactory.kxy, which its Conv2d uses; its Linear rule is its
own) allocates the per-example gradients with torch.zeros at torch's default dtype, float32 even
for a float64 model, which caps its conv kernel's agreement at ~1e-7: the agreement call runs it
with float64 as the default dtype.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from bench.bench_kernels import method_row_inputs, method_row_network, method_rows
from bench.peers.harness import Timing, interleaved, ratio_cell, seconds_cell
from bench.peers.infinite_cnn import infinite_cnn_row
from bench.peers.nn_copies import sequential_copy, vit_copy
from bench.peers.nt_client import NeuralTangents, jax_missing
from bench.peers.nt_export import sequential_problem, vit_problem
from ntklab.api_schemas.spec import model_spec
from ntklab.engine.kernels.ntk import resolve_method, tangent_kernel
from ntklab.engine.nets.network import build_network

NTK_COLUMNS = [
    "work",
    "ntklab auto (s, method picked)",
    "ntklab structured (s)",
    "nngeometry (s)",
    "× auto",
    "neural-tangents (s)",
    "× auto",
    "float64 agreement (structured, nngeometry, neural-tangents vs auto)",
]
VIT_NNGEOMETRY = (
    "nngeometry 0.4's Linear rule multiplies the layer input as a [n, in] matrix (torch.mm(x, xᵀ)); the "
    "ViT's Linear layers see [n, T, d] tokens, and its class and position tables belong to no layer"
)


@dataclass(frozen=True)
class Row:
    """One network: its seeded (net, x) in a dtype, the neural-tangents port and the nngeometry copy."""

    label: str
    build: Callable[[torch.dtype], tuple[nn.Module, torch.Tensor]]
    export: Callable[[nn.Module, torch.Tensor], dict]
    copy: Callable[[nn.Module], nn.Module]
    nngeometry_note: str = ""


def mlp(O: int) -> Callable[[torch.dtype], tuple[nn.Module, torch.Tensor]]:
    def build(dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
        spec = model_spec(hidden=[1024] * 3, activation="tanh", output_dim=O, parameterization="standard")
        net = build_network(spec, (64,), seed=0, dtype=dtype)
        return net, torch.randn(256, 64, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)

    return build


def cnn(dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
    row = method_rows(quick=False)[2]
    spec = model_spec(**row["fields"], parameterization="standard")
    return build_network(spec, tuple(row["shape"]), seed=0, dtype=dtype), method_row_inputs(row, row["n"], dtype)


def vit(dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
    row = method_rows(quick=False)[3]
    return method_row_network(row, dtype), method_row_inputs(row, row["n"], dtype)


ROWS = [
    *(Row(f"MLP 64-1024³-{O} tanh, n=256", mlp(O), sequential_problem, sequential_copy) for O in (1, 10)),
    Row("CNN 3×conv32 relu GAP O=10, n=128", cnn, sequential_problem, sequential_copy),
    Row("ViT block O=10, n=64", vit, vit_problem, vit_copy, VIT_NNGEOMETRY),
]


def nngeometry_kernel(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """nngeometry's GramMatrix of model's outputs on x, one batch, as K [n·O, n·O]."""
    from nngeometry.gram import GramMatrix
    from torch.utils.data import DataLoader, TensorDataset

    G = GramMatrix(model, DataLoader(TensorDataset(x), batch_size=len(x)), function=lambda inputs: model(inputs)).data
    O, n = G.shape[:2]
    return G.permute(1, 0, 3, 2).reshape(n * O, n * O)


def ntk_rows(repeats: int, print_row: Callable[..., None], threads: int) -> None:
    skip = jax_missing()
    if skip:
        print(f"neural-tangents {skip}")
    for row in ROWS:
        _kernel_row(row, repeats, print_row, threads, skip)
    infinite_cnn_row(repeats, print_row, threads, skip)


def _kernel_row(row: Row, repeats: int, print_row: Callable[..., None], threads: int, skip: str | None) -> None:
    net64, x64 = row.build(torch.float64)
    net, x = row.build(torch.float32)
    copy = row.copy(net)
    with tempfile.TemporaryDirectory() as folder:
        worker = None if skip else NeuralTangents(row.export(net64, x64), Path(folder), threads)
        calls = {
            "auto": lambda: tangent_kernel(net, x, method="auto", of="logits"),
            "structured": lambda: tangent_kernel(net, x, method="structured", of="logits"),
            "nngeometry": lambda: nngeometry_kernel(copy, x),
        }
        if worker is not None:
            calls["neural-tangents"] = worker.call
        timings = interleaved(calls, repeats)
        agreement = _agreement(net64, x64, row.copy, worker, timings["nngeometry"])
        if worker is not None:
            worker.close()
    nngeometry = seconds_cell(timings["nngeometry"]) + (f"; {row.nngeometry_note}" if row.nngeometry_note else "")
    nt_cells = (
        [seconds_cell(timings["neural-tangents"]), ratio_cell(timings["neural-tangents"], timings["auto"])]
        if worker is not None
        else [skip, "–"]
    )
    print_row(
        row.label,
        f"{seconds_cell(timings['auto'])} ({resolve_method(net, 'auto', x, of='logits')})",
        seconds_cell(timings["structured"]),
        nngeometry,
        ratio_cell(timings["nngeometry"], timings["auto"]),
        *nt_cells,
        agreement,
    )


def _agreement(
    net: nn.Module, x: torch.Tensor, copy: Callable, worker: NeuralTangents | None, nngeometry: Timing
) -> str:
    """max |K − K_auto| / max |K_auto| in float64 for structured, nngeometry and neural-tangents ("–" where one failed)."""
    K = tangent_kernel(net, x, method="auto", of="logits")
    others = [
        tangent_kernel(net, x, method="structured", of="logits"),
        None if nngeometry.failed else _in_float64(lambda: nngeometry_kernel(copy(net), x)),
        None if worker is None else worker.kernel64(),
    ]
    scale = float(K.abs().max())
    return ", ".join("–" if other is None else f"{float((other - K).abs().max()) / scale:.0e}" for other in others)


def _in_float64(call: Callable[[], torch.Tensor]) -> torch.Tensor:
    """call() with torch's default dtype float64 (nngeometry's buffers, module docstring), restored after."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return call()
    finally:
        torch.set_default_dtype(default)

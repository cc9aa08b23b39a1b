"""The zoo, measured: docs/models.md's table of every architecture of tests/zoo/architectures.py uploaded as ONNX.

    .venv/bin/python -m bench.zoo_table [--threads N] [--repeats R] [--only NAME ...]

For each member (a float64 module, seeded, and its input batch x of 4 points):

accepted      the upload as the SDK makes it (ntklab.onnx_export.export_module, TorchScript exporter: its
              parameter and output checks on the worker's converter) and then as the service checks it
              (ntklab.service.onnx_upload.check_onnx: operators and attributes, shape inference, signature):
              "yes", or the first line of the error.
kernel error  ‖K − K_ref‖_F / ‖K_ref‖_F: K of the export converted in float64
              (ntklab.engine.nets.onnx_model.build_onnx_network) by tangent_kernel(method="auto"), K_ref the
              float64 torch.func reference on the module itself (tests/zoo/reference.module_kernel).
auto          the median wall time of R calls of tangent_kernel(net, x, method="auto") after one warm-up
              call, and the method the cost model picked on x.
dynamo=True   the same upload by the torch.export-based exporter (export_module(..., dynamo=True)).

Prints a caption line and one Markdown table on stdout (no heading: docs/models.md gives it one), a row per
member as it is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

from bench.tables import print_row
from tests.zoo.architectures import ARCHITECTURES, OUT
from tests.zoo.reference import module_kernel

MODEL_ID = "mdl_" + "0" * 32


def first_line(error: BaseException) -> str:
    """The error's type and first line, safe in a Markdown cell."""
    text = getattr(error, "detail", None) or str(error)
    line = next((line.strip() for line in str(text).splitlines() if line.strip()), "")
    line = line if len(line) <= 160 else line[:157] + "…"
    return f"{type(error).__name__}: {line}".replace("|", "\\|")


def upload(module: torch.nn.Module, x: torch.Tensor, *, dynamo: bool) -> bytes:
    """The bytes the SDK would send, checked as the service checks an upload; raises the first refusal."""
    from ntklab.config.settings import Settings
    from ntklab.onnx_export import export_module
    from ntklab.service.onnx_upload import check_onnx

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):  # the dynamo exporter's progress lines
        warnings.simplefilter("ignore")
        onnx_bytes = export_module(module, x, dynamo=dynamo)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.onnx"
        path.write_bytes(onnx_bytes)
        check_onnx(path, Settings())
    return onnx_bytes


def accepted(module: torch.nn.Module, x: torch.Tensor, *, dynamo: bool) -> tuple[bytes | None, str]:
    try:
        return upload(module, x, dynamo=dynamo), "yes"
    except Exception as error:  # noqa: BLE001 — the table reports whatever refused the upload
        return None, first_line(error)


def measure(name: str, repeats: int) -> list[str]:
    from ntklab.api_schemas.spec import model_spec
    from ntklab.engine.kernels import ntk
    from ntklab.engine.nets.onnx_model import build_onnx_network

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        member = ARCHITECTURES[name]()
    module, x = member.module, member.x
    p = sum(t.numel() for t in module.parameters() if t.requires_grad)
    onnx_bytes, verdict = accepted(module, x, dynamo=False)
    error = seconds = "—"
    if onnx_bytes is not None:
        try:
            net = build_onnx_network(
                model_spec(kind="onnx", id=MODEL_ID, output_dim=OUT), onnx_bytes, dtype=torch.float64
            )
            picked = ntk.resolve_method(net, "auto", x, of="logits")
            K = ntk.tangent_kernel(net, x, method="auto", of="logits")
            reference = module_kernel(module, x)
            error = f"{float(torch.linalg.norm(K - reference) / torch.linalg.norm(reference)):.1e}"
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                ntk.tangent_kernel(net, x, method="auto", of="logits")
                times.append(time.perf_counter() - start)
            seconds = f"{statistics.median(times):.3f} ({picked})"
        except Exception as failure:  # noqa: BLE001
            error = first_line(failure)
    _, dynamo = accepted(module, x, dynamo=True)
    return [name, member.library, f"{p:,}", verdict, error, seconds, dynamo]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="these members only (default: all of ARCHITECTURES)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = args.only or list(ARCHITECTURES)
    print(
        f"Float64, n = 4 points, O = {OUT}, {args.threads} torch thread(s); auto's time is the median of "
        f"{args.repeats} calls after a warm-up.\n"
    )
    columns = [
        "architecture",
        "library",
        "parameters",
        "accepted (TorchScript)",
        "kernel error vs module",
        "auto: time (s) (method)",
        "accepted (dynamo=True)",
    ]
    print_row(*columns)
    print("|" + "---|" * len(columns))
    for name in names:
        print_row(*measure(name, args.repeats))


if __name__ == "__main__":
    main()

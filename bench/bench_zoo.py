"""Benchmark: the tangent kernel of real architectures uploaded as ONNX (GPT-2, ViT, ResNet of the zoo, two widths each).

    .venv/bin/python -m bench.bench_zoo [--quick] [--threads N]

The networks are tests/zoo/architectures.py's Hugging Face members with a width parameter
(GPT-2 n_embd, ViT hidden_size with intermediate_size = 2·hidden, ResNet hidden_sizes and
embedding_size); at the first width each is the zoo's own configuration. Each is cast to
float32, exported once by ntklab.onnx_export.export_module (TorchScript, the SDK's default)
and converted as the worker converts an upload (ntklab.engine.nets.onnx_model.build_onnx_network,
float32). Inputs: n token sequences of length 6 (GPT-2) or n 3×16×16 images (ViT, ResNet),
the zoo's seeded inputs; O = 3 outputs.

Protocol of bench/bench_graph_kernels.py and bench/bench_kernels.py (whose helpers it
reuses): every (network, width, n, method) cell runs in a fresh subprocess, one warm-up
call, then the median wall time of `repeats` calls. Memory is the peak resident size above
the size just before the first call; unlike bench_kernels' ru_maxrss, the peak is reset
first (/proc/self/clear_refs, as tests/engine/test_estimate_peaks.py does) so that building
the Hugging Face module and converting the export do not set it. Ratios are against
`jacobian` measured in the same run. Methods: `structured` (the converted network's layers
with a rule, the rest by the per-sample fallback), `jacobian` (vmap(jacrev)), and
nngeometry's GramMatrix on the user's torch module itself (float32), where its hooks support
every layer holding parameters; a module it refuses is reported as "fails" with the error.
Each non-jacobian kernel is checked against `jacobian` on the converted network. The cost
model's FLOPs per method and `auto`'s pick are computed in the parent on the converted network.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from bench.bench_kernels import (
    cell_arguments,
    measure_in_subprocess,
    nngeometry_kernel,
    nngeometry_status,
    rss_bytes,
)
from bench.tables import print_head, print_row
from tests.zoo.architectures import IMAGE, OUT, VOCAB, Member, _hf, images, tokens

METHODS = ("structured", "jacobian", "nngeometry")
MODEL_ID = "mdl_" + "0" * 32


# --------------------------------------------------------------------------- the networks, by width


def gpt2(width: int, n: int) -> Member:
    """GPT-2, 2 layers, 2 heads, n_embd = width (16: the zoo's gpt2)."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    config = GPT2Config(
        vocab_size=VOCAB, n_positions=16, n_embd=width, n_layer=2, n_head=2, num_labels=OUT, pad_token_id=0
    )
    return _hf(lambda: GPT2ForSequenceClassification(config), tokens(n))


def vit(width: int, n: int) -> Member:
    """ViT 16×16 / 4×4 patches, 2 layers, 2 heads, hidden = width, MLP 2·width (16: the zoo's vit)."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        image_size=16,
        patch_size=4,
        num_channels=3,
        hidden_size=width,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * width,
        num_labels=OUT,
    )
    return _hf(lambda: ViTForImageClassification(config), images(n))


def resnet(width: int, n: int) -> Member:
    """ResNet, basic blocks, depths [1, 1], hidden_sizes [width, 2·width], embedding width (8: the zoo's resnet)."""
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(
        num_channels=3,
        embedding_size=width,
        hidden_sizes=[width, 2 * width],
        depths=[1, 1],
        layer_type="basic",
        num_labels=OUT,
    )
    return _hf(lambda: ResNetForImageClassification(config), images(n))


NETS = {"gpt2": (gpt2, (16, 64)), "vit": (vit, (16, 64)), "resnet": (resnet, (8, 32))}
LABELS = {
    "gpt2": lambda w: f"GPT-2 2×layers n_embd={w} (tokens 6)",
    "vit": lambda w: f"ViT {IMAGE[1]}×{IMAGE[2]}/4 hidden={w} ×2 layers",
    "resnet": lambda w: f"ResNet basic [{w},{2 * w}]",
}


def member(name: str, width: int, n: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """The seeded module in float32 (eval mode) and its n inputs (int64 tokens or float32 images)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = NETS[name][0](width, n)
    x = built.x.float() if built.x.is_floating_point() else built.x
    return built.module.float().eval(), x


def converted(onnx_bytes: bytes) -> torch.nn.Module:
    from ntklab.api_schemas.spec import model_spec
    from ntklab.engine.nets.onnx_model import build_onnx_network

    return build_onnx_network(model_spec(kind="onnx", id=MODEL_ID, output_dim=OUT), onnx_bytes, dtype=torch.float32)


def parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


# --------------------------------------------------------------------------- one cell, in a subprocess


def _status(key: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(key)) * 1024


def _reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux: writing 5 to /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def run_cell(job: dict) -> dict:
    from ntklab.engine.kernels import ntk

    torch.set_num_threads(job["threads"])
    module, x = member(job["name"], job["width"], job["n"])
    net = converted(Path(job["onnx"]).read_bytes())
    method = job["method"]
    if method == "nngeometry":
        compute = lambda: nngeometry_kernel(module, x)  # noqa: E731
    else:
        compute = lambda: ntk.tangent_kernel(net, x, method=method, of="logits")  # noqa: E731
    _reset_peak()
    before = rss_bytes()
    K = compute()
    times = []
    for _ in range(job["repeats"]):
        start = time.perf_counter()
        compute()
        times.append(time.perf_counter() - start)
    peak = _status("VmHWM:")
    result = dict(seconds=statistics.median(times), peak_mb=max(0, peak - before) / 2**20)
    if method != "jacobian":
        ours = ntk.tangent_kernel(net, x, method="jacobian", of="logits")
        result["check"] = float(torch.linalg.norm(K - ours) / torch.linalg.norm(ours))
    return result


# --------------------------------------------------------------------------- the table


def export(name: str, width: int, n: int, directory: Path) -> tuple[Path, int, dict, str]:
    """The member exported to `directory` (path), its trainable parameter count, the cost model's GFLOP per
    method on the converted network, and auto's pick."""
    from ntklab.engine.kernels import kernel_cost, ntk
    from ntklab.onnx_export import export_module

    module, x = member(name, width, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx_bytes = export_module(module, x)
    path = directory / f"{name}-{width}.onnx"
    path.write_bytes(onnx_bytes)
    costs = ntk.kernel_costs(converted(onnx_bytes), x, of="logits")
    picked = kernel_cost.cheapest(costs, ntk.MEMORY_BUDGET_BYTES)
    return path, parameters(module), {method: cost.flops / 1e9 for method, cost in costs.items()}, picked


def kernel_table(args) -> None:
    repeats = 3 if args.quick else 5
    sizes = (64,) if args.quick else (64, 256)
    print_head(
        f"Tangent kernel of zoo architectures uploaded as ONNX: median of {repeats} calls, {args.threads} thread(s), "
        "float32, kernel of the logits (O = 3)",
        ["network", "n", "p", "method", "time (s)", "× vs jacobian", "peak extra RSS (MB)", "cost model GFLOP", "note"],
    )
    with tempfile.TemporaryDirectory() as directory:
        for name, (_, widths) in NETS.items():
            for width in widths:
                for n in sizes:
                    path, p, estimates, picked = export(name, width, n, Path(directory))
                    results = {
                        method: measure_in_subprocess(
                            "bench.bench_zoo",
                            dict(
                                name=name,
                                width=width,
                                n=n,
                                method=method,
                                repeats=repeats,
                                threads=args.threads,
                                onnx=str(path),
                            ),
                            args.timeout,
                        )
                        for method in METHODS
                    }
                    reference = results["jacobian"].get("seconds")
                    for method, r in results.items():
                        estimate = estimates.get(method)
                        gflop = f"{estimate:.2f}" if estimate is not None else "—"
                        if "seconds" not in r:
                            print_row(
                                LABELS[name](width), n, f"{p:,}", method, "—", "—", "—", gflop, f"fails: {r['error']}"
                            )
                            continue
                        notes = []
                        if method == picked:
                            notes.append("auto picks this")
                        if "check" in r:
                            notes.append(f"vs jacobian {r['check']:.1e}")
                        ratio = f"{reference / r['seconds']:.1f}×" if reference else "—"
                        print_row(
                            LABELS[name](width),
                            n,
                            f"{p:,}",
                            method,
                            f"{r['seconds']:.3f}",
                            ratio,
                            f"{r['peak_mb']:.0f}",
                            gflop,
                            "; ".join(notes),
                        )
                    if picked not in results:
                        print_row(
                            LABELS[name](width),
                            n,
                            f"{p:,}",
                            "auto",
                            "—",
                            "—",
                            "—",
                            f"{estimates[picked]:.2f}",
                            f"auto picks {picked}",
                        )


def main() -> None:
    args = cell_arguments(__doc__.splitlines()[0])
    if args.cell:
        print(json.dumps(run_cell(json.loads(args.cell))))
        return
    print(f"torch {torch.__version__}, {nngeometry_status()}")
    kernel_table(args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

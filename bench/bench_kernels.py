"""Benchmark: tangent-kernel methods × sizes, and Lanczos convergence of the Hessian norm.

    .venv/bin/python -m bench.bench_kernels [--quick] [--tables all|methods|kernels|lanczos] [--threads N]
                                            [--max-seconds S] [--max-gb G]

Methods table (issue 29). On each bench network (METHOD_ROWS: MLPs 64-1024³ tanh with O = 1 and
10, a CNN of three 32-channel convolutions with global average pooling and O = 10, a ViT block),
in one fresh subprocess a row: one warm-up call of each of structured, jacobian, ntk_vp and
auto, then `repeats` rounds that call each once in turn (interleaved, so load drifts hit all
alike); the median wall time per method and, in brackets, the median CPU time of the process
(time.process_time: on a machine shared with other work it is the steadier measure), the
method auto picked, and auto's median over the fastest method's (wall, and CPU). A method the cost model puts above --max-gb of unchunkable memory or --max-seconds
per call (at FLOPS_PER_SECOND) is not run, and its estimate is printed.

Kernel table. Every (network, n, method) cell runs in a fresh subprocess: one warm-up call,
then the median wall time of `repeats` calls, and the peak resident memory of the
subprocess (resource.getrusage ru_maxrss) above its RSS just before the first call (torch,
the network and the inputs already loaded). Ratios are against `jacobian` measured in the
same run. A cell whose estimated memory exceeds --max-gb or estimated time per call
exceeds --max-seconds is skipped and the estimate printed. The outside baseline is
nngeometry's GramMatrix (hooks on torch.nn.Linear / Conv2d) on a torch.nn copy of the same
network in the standard parameterization, checked against our kernel of that network.

Lanczos table. hessian_norm of f_0(w; x_i) for the first probe points: Lanczos from the
same start vector for k = 2, 4, …, k_max steps; "HVPs to 1e-4" is the smallest k after
which every later run stays within 1e-4 relative of the value at k_max (the worst point).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

from bench.tables import print_head, print_row
from ntklab.api_schemas.spec import model_spec
from ntklab.engine.curvature.lanczos import lanczos_many
from ntklab.engine.curvature.operators import model_hessian_operator
from ntklab.engine.kernels.ntk import kernel_costs, resolve_method, tangent_kernel
from ntklab.engine.nets.network import build_network
from ntklab.planner.architecture import count_parameters

METHODS = ("structured", "jacobian", "ntk_vp", "nngeometry")
KERNEL_METHODS = ("structured", "jacobian", "ntk_vp")
FLOPS_PER_SECOND = 2e10
MLP_INPUT = 100
CNN_SPEC = dict(kind="cnn", hidden=[32, 32], activation="relu", output_dim=10)


def method_rows(quick: bool) -> list[dict]:
    """The issue-29 bench networks: name, builder arguments and n (halved with --quick)."""
    mlp = dict(hidden=[1024] * 3, activation="tanh")
    rows = [
        dict(name="MLP 64-1024³-1 tanh", net="mlp", fields=dict(mlp, output_dim=1), shape=[64], n=256),
        dict(name="MLP 64-1024³-10 tanh", net="mlp", fields=dict(mlp, output_dim=10), shape=[64], n=256),
        dict(
            name="CNN 3×conv 32, GAP, O=10 (digits 8×8)",
            net="cnn",
            fields=dict(kind="cnn", hidden=[32] * 3, activation="relu", output_dim=10),
            shape=[1, 8, 8],
            n=128,
        ),
        dict(name="ViT block (2×2 patches, pre-LN attention, MLP), O=10", net="vit", shape=[1, 8, 8], n=64),
    ]
    return [dict(row, n=row["n"] // 2) for row in rows] if quick else rows


def method_row_network(row: dict, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The row's seeded network: build_network for the MLP and CNN, bench_graph_kernels' ViT with one block."""
    if row["net"] == "vit":
        from bench.bench_graph_kernels import ViT, initialized  # that module imports this one's helpers

        torch.manual_seed(0)
        return initialized(ViT(depth=1)).to(dtype)
    return build_network(model_spec(**row["fields"]), tuple(row["shape"]), seed=0, dtype=dtype)


def method_row_inputs(row: dict, n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return inputs(dict(net="cnn" if row["net"] != "mlp" else "mlp", n=n, shape=row["shape"])).to(dtype)


def run_method_row(row: dict, repeats: int, threads: int, max_seconds: float, max_gb: float) -> dict:
    """Interleaved timings of every method and auto on one row (module docstring)."""
    torch.set_num_threads(threads)
    net, x = method_row_network(row), method_row_inputs(row, row["n"])
    costs = kernel_costs(net, x, of="logits")
    skipped = {
        m: f"not run: cost model {c.flops / 1e9:.0f} GFLOP, {c.memory / 2**30:.1f} GB"
        for m, c in costs.items()
        if c.memory > max_gb * 2**30 or c.flops / FLOPS_PER_SECOND > max_seconds
    }
    run = [m for m in (*KERNEL_METHODS, "auto") if m not in skipped]
    for method in run:
        tangent_kernel(net, x, method=method, of="logits")
    times: dict[str, list[float]] = {m: [] for m in run}
    cpu: dict[str, list[float]] = {m: [] for m in run}
    for _ in range(repeats):
        for method in run:
            start, start_cpu = time.perf_counter(), time.process_time()
            tangent_kernel(net, x, method=method, of="logits")
            times[method].append(time.perf_counter() - start)
            cpu[method].append(time.process_time() - start_cpu)
    return dict(
        seconds={m: statistics.median(t) for m, t in times.items()},
        cpu={m: statistics.median(t) for m, t in cpu.items()},
        skipped=skipped,
        picked=resolve_method(net, "auto", x, of="logits"),
        gflop={m: c.flops / 1e9 for m, c in costs.items()},
    )


def methods_table(args) -> None:
    repeats = 5
    print_head(
        f"Kernel methods and auto, interleaved: median of {repeats} rounds, {args.threads} thread(s), float32, "
        "kernel of the logits",
        [
            "network",
            "n",
            "structured s (CPU s)",
            "jacobian s (CPU s)",
            "ntk_vp s (CPU s)",
            "auto s (CPU s)",
            "auto picked",
            "auto / fastest (CPU)",
            "cost model GFLOP s / j / v",
        ],
    )
    for row in method_rows(args.quick):
        payload = dict(row=row, repeats=repeats, threads=args.threads, max_seconds=args.max_seconds, max_gb=args.max_gb)
        r = measure_in_subprocess("bench.bench_kernels", dict(methods=payload), timeout=1800)
        if "error" in r:
            print_row(row["name"], row["n"], *["—"] * 6, r["error"])
            continue
        seconds, cpu = r["seconds"], r["cpu"]
        cell = lambda m: f"{seconds[m]:.3f} ({cpu[m]:.3f})" if m in seconds else r["skipped"][m]  # noqa: E731
        ratio = lambda t: t["auto"] / min(t[m] for m in KERNEL_METHODS if m in t)  # noqa: E731
        gflop = " / ".join(f"{r['gflop'][m]:.1f}" for m in KERNEL_METHODS)
        print_row(
            row["name"],
            row["n"],
            *(cell(m) for m in KERNEL_METHODS),
            cell("auto"),
            r["picked"],
            f"{ratio(seconds):.2f} ({ratio(cpu):.2f})",
            gflop,
        )


def cells(quick: bool) -> list[dict]:
    widths = (512, 2048) if quick else (512, 2048, 8192)
    mlps = [
        dict(net="mlp", fields=dict(hidden=[m, m], activation="relu", output_dim=1), shape=[MLP_INPUT], n=n)
        for m in widths
        for n in (64, 256)
    ]
    cnns = [dict(net="cnn", fields=CNN_SPEC, shape=[1, 8, 8], n=n) for n in ((64,) if quick else (64, 256))]
    return mlps + cnns


def label(cell: dict) -> str:
    if cell["net"] == "mlp":
        return f"mlp d=100 [{cell['fields']['hidden'][0]}]×2"
    return "cnn digits 1×8×8 [32,32] O=10"


def estimate(cell: dict, method: str) -> tuple[float, float]:
    """(bytes, seconds) per call, from the counts of the dominant tensors and FLOPs (float32)."""
    spec = model_spec(**cell["fields"])
    p = count_parameters(spec, tuple(cell["shape"]))
    n, O = cell["n"], spec.output_dim
    positions = 64 if cell["net"] == "cnn" else 1
    if method == "jacobian":
        return 1.3 * n * O * p * 4, (4 * n * O * p * positions + 2 * (n * O) ** 2 * p) / FLOPS_PER_SECOND
    if method == "ntk_vp":
        return 256 * 2**20 + 8 * p * 4, 10 * n * O * n * p * positions / FLOPS_PER_SECOND
    widths = sum(spec.hidden) + MLP_INPUT
    grams = 2 * n * n * positions * widths * (1 + O * O)
    return 4 * n * O * widths * positions * 4, (2 * n * p * positions * (1 + O) + grams) / FLOPS_PER_SECOND


# --------------------------------------------------------------------------- one cell, in a subprocess


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def torch_nn_copy(net) -> torch.nn.Module:
    """A torch.nn.Sequential with the same layers and weights c·W (what nngeometry's hooks understand)."""
    modules: list[torch.nn.Module] = []
    for stage in net.stages:
        layer = stage.layer
        if hasattr(layer, "kernel_size"):
            copy = torch.nn.Conv2d(
                layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride, layer.padding
            )
        else:
            copy = torch.nn.Linear(layer.in_features, layer.out_features)
        modules += [copy, torch.nn.ReLU()]
    if len(net.input_shape) == 3:  # a convolutional net reads (C, H, W) and pools before its readout
        modules += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()]
    modules.append(torch.nn.Linear(net.readout.in_features, net.readout.out_features))
    sequential = torch.nn.Sequential(*modules)
    ours = [stage.layer for stage in net.stages] + [net.readout]
    theirs = [m for m in sequential if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    with torch.no_grad():
        for mine, copy in zip(ours, theirs):
            copy.weight.copy_(mine.weight_multiplier * mine.weight)
            copy.bias.copy_(mine.bias)
    return sequential


def nngeometry_kernel(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    from nngeometry.gram import GramMatrix
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(x), batch_size=min(len(x), 256))
    G = GramMatrix(model, loader, function=lambda inputs: model(inputs)).data
    O, n = G.shape[:2]
    return G.permute(1, 0, 3, 2).reshape(n * O, n * O)


def inputs(cell: dict) -> torch.Tensor:
    if cell["net"] == "cnn":
        from sklearn.datasets import load_digits

        digits = torch.tensor(load_digits().data[: cell["n"]], dtype=torch.float32) / 16.0
        return digits.reshape(-1, 1, 8, 8)
    return torch.randn(cell["n"], *cell["shape"], generator=torch.Generator().manual_seed(0))


def run_cell(cell: dict, method: str, repeats: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    parameterization = "standard" if method == "nngeometry" else "ntk"
    spec = model_spec(**cell["fields"], parameterization=parameterization)
    net = build_network(spec, tuple(cell["shape"]), seed=0)
    x = inputs(cell)
    if method == "nngeometry":
        model = torch_nn_copy(net)
        compute = lambda: nngeometry_kernel(model, x)  # noqa: E731
    else:
        compute = lambda: tangent_kernel(net, x, method=method, of="logits")  # noqa: E731
    before = rss_bytes()
    K = compute()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compute()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = dict(seconds=statistics.median(times), peak_mb=max(0, peak - before) / 2**20)
    if method == "nngeometry" and x.shape[0] <= 64:
        ours = tangent_kernel(net, x, method="structured", of="logits")
        result["check"] = float(torch.linalg.norm(K - ours) / torch.linalg.norm(ours))
    return result


def measure(cell: dict, method: str, repeats: int, threads: int, timeout: float) -> dict:
    return measure_in_subprocess(
        "bench.bench_kernels", dict(cell=cell, method=method, repeats=repeats, threads=threads), timeout
    )


def measure_in_subprocess(module: str, payload: dict, timeout: float) -> dict:
    """`python -m module --cell <payload json>` in a fresh process; its last stdout line (JSON), or {error}."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", module, "--cell", json.dumps(payload)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return dict(error=f"timed out after {timeout:.0f} s")
    if done.returncode != 0:
        return dict(error=(done.stderr.strip().splitlines() or ["failed"])[-1][:120])
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- tables


def kernel_table(args) -> None:
    repeats = 3 if args.quick else 5
    print(f"\n## Tangent kernel: median of {repeats} calls, {args.threads} thread(s), float32, kernel of the logits\n")
    print("| network | n | p | method | time (s) | × vs jacobian | peak extra RSS (MB) | note |")
    print("|---|---|---|---|---|---|---|---|")
    for cell in cells(args.quick):
        p = count_parameters(model_spec(**cell["fields"]), tuple(cell["shape"]))
        results = {}
        for method in METHODS:
            bytes_, seconds = estimate(cell, "jacobian" if method == "nngeometry" else method)
            if bytes_ > args.max_gb * 2**30 or seconds > args.max_seconds:
                results[method] = dict(skipped=f"skipped: est. {bytes_ / 2**30:.1f} GB, {seconds:.0f} s per call")
                continue
            results[method] = measure(
                cell, method, repeats, args.threads, timeout=60 + 10 * (repeats + 1) * max(seconds, 1)
            )
        reference = results["jacobian"].get("seconds")
        for method, r in results.items():
            if "seconds" in r:
                ratio = f"{reference / r['seconds']:.1f}×" if reference else "—"
                note = f"agrees with ours to {r['check']:.1e}" if "check" in r else ""
                print(
                    f"| {label(cell)} | {cell['n']} | {p:,} | {method} | {r['seconds']:.3f} | {ratio} | {r['peak_mb']:.0f} | {note} |"
                )
            else:
                print(
                    f"| {label(cell)} | {cell['n']} | {p:,} | {method} | — | — | — | {r.get('skipped') or r.get('error')} |"
                )
        sys.stdout.flush()


def lanczos_table(args) -> None:
    torch.set_num_threads(args.threads)
    steps = list(range(2, 61 if args.quick else 101, 2))
    points = 2 if args.quick else 4
    nets = [
        ("mlp d=100 [512] tanh, linear head", dict(hidden=[512], activation="tanh", output_dim=1), (100,)),
        ("mlp d=100 [4096] tanh, linear head", dict(hidden=[4096], activation="tanh", output_dim=1), (100,)),
        (
            "mlp d=100 [4096] tanh, swish head",
            dict(hidden=[4096], activation="tanh", output_dim=1, output_activation="swish"),
            (100,),
        ),
        ("mlp d=100 [512]×2 gelu, linear head", dict(hidden=[512, 512], activation="gelu", output_dim=1), (100,)),
        (
            "cnn digits [32,32] softplus, softmax head",
            dict(CNN_SPEC, activation="softplus", output_activation="softmax"),
            (1, 8, 8),
        ),
    ]
    print(
        f"\n## Lanczos: Hessian-vector products to reach 1e-4 relative of the value at {steps[-1]} steps (float32, worst of {points} points, output 0)\n"
    )
    print("| network | p | ‖H‖ at k_max | HVPs to 1e-4 | rel. error at 20 | at 40 | s per HVP |")
    print("|---|---|---|---|---|---|---|")
    for name, fields, shape in nets:
        net = build_network(model_spec(**fields), shape, seed=0)
        x = torch.randn(points, *shape, generator=torch.Generator().manual_seed(1))
        worst_needed, errors_20, errors_40, seconds = 0, [], [], []
        for i in range(points):
            H = model_hessian_operator(net, x[i : i + 1], outputs=1, max_batch=1)
            history = []
            for k in steps:
                start = time.perf_counter()
                [ritz] = lanczos_many(H, steps=k, top_k=1, tolerance=0.0, generator=torch.Generator().manual_seed(0))
                top = ritz.values
                seconds.append((time.perf_counter() - start) / k)
                history.append(abs(top[0]))
            converged = history[-1]
            errors = np.abs(np.array(history) - converged) / converged
            bad = [k for k, e in zip(steps, errors) if e > 1e-4]
            worst_needed = max(worst_needed, (max(bad) + 2) if bad else steps[0])
            errors_20.append(errors[steps.index(20)])
            errors_40.append(errors[steps.index(40)])
        print(
            f"| {name} | {H.dim:,} | {converged:.4g} | {worst_needed} | {max(errors_20):.1e} | "
            f"{max(errors_40):.1e} | {statistics.median(seconds):.4f} |"
        )
        sys.stdout.flush()


def cell_arguments(description: str) -> argparse.Namespace:
    """The command line of a bench that runs each cell in a subprocess (measure_in_subprocess): --quick (n = 64 only,
    3 repeats), --threads, --timeout (seconds per cell) and the hidden --cell JSON a subprocess is given."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="n = 64 only, 3 repeats")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per cell")
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    return parser.parse_known_args()[0]


def nngeometry_status() -> str:
    try:
        import nngeometry  # noqa: F401
    except ImportError as error:
        return f"nngeometry is not installed ({error}); its column is reported as failed"
    return "nngeometry installed: GramMatrix is the outside baseline"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="m ∈ {512, 2048}, fewer repeats and Lanczos steps")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-seconds", type=float, default=None, help="skip cells estimated slower per call")
    parser.add_argument("--max-gb", type=float, default=8.0, help="skip cells estimated larger")
    parser.add_argument("--tables", choices=("all", "methods", "kernels", "lanczos"), default="all")
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        job = json.loads(args.cell)
        if "methods" in job:
            print(json.dumps(run_method_row(**job["methods"])))
        else:
            print(json.dumps(run_cell(job["cell"], job["method"], job["repeats"], job["threads"])))
        return
    if args.max_seconds is None:
        args.max_seconds = 60.0 if args.quick else 300.0
    print(f"torch {torch.__version__}, {nngeometry_status()}")
    if args.tables in ("all", "methods"):
        methods_table(args)
    if args.tables in ("all", "kernels"):
        kernel_table(args)
    if args.tables in ("all", "lanczos"):
        lanczos_table(args)


if __name__ == "__main__":
    main()

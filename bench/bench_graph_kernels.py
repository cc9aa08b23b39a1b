"""Benchmark: the tangent kernel of layer graphs (a small ViT, a VGG-like CNN) by each method.

    .venv/bin/python -m bench.bench_graph_kernels [--quick] [--threads N]

Same protocol as bench/bench_kernels.py (whose helpers it reuses): every (network, n,
method) cell runs in a fresh subprocess, one warm-up call, then the median wall time of
`repeats` calls and the peak resident memory above the RSS just before the first call.
Ratios are against `jacobian` measured in the same run. Methods: `structured` (the rules;
LayerNorm's affine parameters and the class/position tables by the direct rules,
kernel_rules.add_direct_kernel, where the parameter-use guard recognises their one read; anything
else by the per-sample fallback), `jacobian`
(vmap(jacrev)), `per-sample chunks` (per_sample.py's fallback applied to every parameter,
memory-budgeted), `auto` (what the cost model picks), and nngeometry's GramMatrix on a
torch.nn copy of the network where it supports the layers (checked against our kernel).
Float32, kernel of the logits, digits 8×8 inputs.
"""

from __future__ import annotations

import json
import math
import resource
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from bench.bench_kernels import (
    cell_arguments,
    inputs,
    measure_in_subprocess,
    nngeometry_kernel,
    nngeometry_status,
    rss_bytes,
)
from bench.tables import print_head, print_row
from ntklab.engine.kernels import kernel_cost, ntk
from ntklab.engine.kernels.per_sample import panel_and_chunk, passes, per_sample_kernel
from ntklab.engine.nets.layers import ScaledConv2d, ScaledLinear

METHODS = ("structured", "jacobian", "per-sample chunks", "auto", "nngeometry")


# --------------------------------------------------------------------------- the networks


def dense(fan_in: int, out: int, scaled: bool) -> nn.Module:
    if scaled:
        return ScaledLinear(fan_in, out, bias=True, weight_multiplier=1 / math.sqrt(fan_in))
    return nn.Linear(fan_in, out)


def conv(c_in: int, c_out: int, k: int, stride: int, padding: int, scaled: bool) -> nn.Module:
    if scaled:
        return ScaledConv2d(
            c_in, c_out, k, stride=stride, padding=padding, bias=True, weight_multiplier=1 / math.sqrt(c_in * k * k)
        )
    return nn.Conv2d(c_in, c_out, k, stride=stride, padding=padding)


class Block(nn.Module):
    """Pre-LN transformer block over [n, T, d]: h + O(softmax(QKᵀ/√d_h) V), then h + MLP(LN h) (gelu)."""

    def __init__(self, d: int, heads: int, hidden: int, scaled: bool) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (dense(d, d, scaled) for _ in range(4))
        self.fc1, self.fc2 = dense(d, hidden, scaled), dense(hidden, d, scaled)

    def forward(self, h):
        n, T, d = h.shape
        u = self.ln1(h)
        q, k, v = (m(u).reshape(n, T, self.heads, -1).transpose(1, 2) for m in (self.q, self.k, self.v))
        attention = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        h = h + self.o((attention @ v).transpose(1, 2).reshape(n, T, d))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class ViT(nn.Module):
    """1×8×8 -> 2×2 patches (a stride-2 conv) -> class token + 16 tokens + positions -> blocks -> LN -> readout."""

    def __init__(self, *, d=32, depth=2, heads=4, hidden=64, out=10, scaled=True) -> None:
        super().__init__()
        self.patch = conv(1, d, 2, 2, 0, scaled)
        self.cls = nn.Parameter(torch.randn(1, 1, d))
        self.position = nn.Parameter(torch.randn(17, d) * 0.1)
        self.blocks = nn.ModuleList([Block(d, heads, hidden, scaled) for _ in range(depth)])
        self.ln = nn.LayerNorm(d)
        self.readout = dense(d, out, scaled)
        self.head = "identity"

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1) + self.position
        for block in self.blocks:
            h = block(h)
        return self.readout(self.ln(h[:, 0]))


class VGG(nn.Module):
    """1×8×8: [conv3-relu]×2, maxpool, [conv3-relu]×2, maxpool, flatten, fc-relu, fc (O=10)."""

    def __init__(self, *, widths=(16, 32), hidden=64, out=10, scaled=True) -> None:
        super().__init__()
        a, b = widths
        self.convs = nn.ModuleList(
            [conv(c_in, c_out, 3, 1, 1, scaled) for c_in, c_out in ((1, a), (a, a), (a, b), (b, b))]
        )
        self.fc, self.readout = dense(4 * b, hidden, scaled), dense(hidden, out, scaled)
        self.head = "identity"

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.convs[1](F.relu(self.convs[0](x)))), 2)
        h = F.max_pool2d(F.relu(self.convs[3](F.relu(self.convs[2](h)))), 2)
        return self.readout(F.relu(self.fc(h.flatten(1))))


NETS = {"vit": ViT, "vgg": VGG}
LABELS = {"vit": "ViT 8×8/2 d=32 ×2 blocks O=10", "vgg": "VGG-like [16,16,32,32]+fc64 O=10"}
NNGEOMETRY_NOTE = {
    "vit": "nngeometry 0.4 has no rule for Linear on [n, T, d] tokens",
}


def build(name: str, scaled: bool, parameterization: str = "ntk") -> nn.Module:
    """The seeded network; scaled layers W ~ N(0, 1), c = 1/√fan_in (ntk) or W ~ N(0, 1/fan_in), c = 1
    (standard: the kernel of the torch.nn copy), b ~ N(0, 1)."""
    torch.manual_seed(0)
    return initialized(NETS[name](scaled=scaled), parameterization)


def initialized(net: nn.Module, parameterization: str = "ntk") -> nn.Module:
    """The scaled layers of net drawn in place as build() says; returns net."""
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, (ScaledLinear, ScaledConv2d)):
                module.weight.normal_()
                module.bias.normal_()
                if parameterization == "standard":
                    module.weight.mul_(module.weight_multiplier)
                    module.weight_multiplier = 1.0
    return net


def torch_nn_copy(net: nn.Module, name: str) -> nn.Module:
    """The same network from torch.nn layers with weights c·W and biases β·b (what nngeometry's hooks understand)."""
    copy = build(name, scaled=False)
    with torch.no_grad():
        for (_, mine), (_, theirs) in zip(net.named_modules(), copy.named_modules()):
            if isinstance(mine, (ScaledLinear, ScaledConv2d)):
                theirs.weight.copy_(mine.weight_multiplier * mine.weight)
                theirs.bias.copy_(mine.bias_multiplier * mine.bias)
            elif isinstance(mine, nn.LayerNorm):
                theirs.load_state_dict(mine.state_dict())
        for key in ("cls", "position"):
            if hasattr(net, key):
                getattr(copy, key).copy_(getattr(net, key))
    return copy


def parameters(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


# --------------------------------------------------------------------------- one cell, in a subprocess


def run_cell(name: str, n: int, method: str, repeats: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    net = build(name, scaled=True, parameterization="standard" if method == "nngeometry" else "ntk")
    x = inputs(dict(net="cnn", n=n))
    names = [k for k, p in net.named_parameters() if p.requires_grad]
    result: dict = {}
    if method == "nngeometry":
        model = torch_nn_copy(net, name)
        compute = lambda: nngeometry_kernel(model, x)  # noqa: E731
    elif method == "per-sample chunks":
        compute = lambda: per_sample_kernel(net, x, lambda f: f, names, budget=ntk.MEMORY_BUDGET_BYTES)  # noqa: E731
    else:
        if method == "auto":
            result["picked"] = ntk.resolve_method(net, "auto", x, of="logits")
        compute = lambda: ntk.tangent_kernel(net, x, method=method, of="logits")  # noqa: E731
    before = rss_bytes()
    K = compute()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compute()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result |= dict(seconds=statistics.median(times), peak_mb=max(0, peak - before) / 2**20)
    if method != "jacobian":
        ours = ntk.tangent_kernel(net, x, method="jacobian", of="logits")
        result["check"] = float(torch.linalg.norm(K - ours) / torch.linalg.norm(ours))
    return result


def measure(name: str, n: int, method: str, repeats: int, threads: int, timeout: float) -> dict:
    payload = dict(name=name, n=n, method=method, repeats=repeats, threads=threads)
    return measure_in_subprocess("bench.bench_graph_kernels", payload, timeout)


# --------------------------------------------------------------------------- the table


def cost_estimates(name: str, n: int) -> dict:
    """The cost model's FLOPs (G) per method, and its pick, computed in this process."""
    net = build(name, scaled=True)
    x = inputs(dict(net="cnn", n=n))
    costs = ntk.kernel_costs(net, x, of="logits")
    estimates = {method: cost.flops / 1e9 for method, cost in costs.items()}
    prof = kernel_cost.profile(net, x, lambda f: f)
    q, _ = panel_and_chunk(n, prof.O, prof.p, prof.itemsize, prof.saved_bytes, ntk.MEMORY_BUDGET_BYTES)
    F_ = prof.forward_flops
    estimates["per-sample chunks"] = (passes(n, q) * n * F_ * (1 + 2 * prof.O) + 2 * (n * prof.O) ** 2 * prof.p) / 1e9
    estimates["auto"] = estimates[kernel_cost.cheapest(costs, ntk.MEMORY_BUDGET_BYTES)]
    return estimates


def kernel_table(args) -> None:
    repeats = 3 if args.quick else 5
    sizes = (64,) if args.quick else (64, 256)
    print_head(
        f"Tangent kernel of layer graphs: median of {repeats} calls, {args.threads} thread(s), float32, "
        "kernel of the logits",
        ["network", "n", "p", "method", "time (s)", "× vs jacobian", "peak extra RSS (MB)", "cost model GFLOP", "note"],
    )
    for name in NETS:
        p = parameters(build(name, scaled=True))
        for n in sizes:
            estimates = cost_estimates(name, n)
            results = {m: measure(name, n, m, repeats, args.threads, timeout=args.timeout) for m in METHODS}
            reference = results["jacobian"].get("seconds")
            for method, r in results.items():
                estimate = estimates.get(method)
                gflop = f"{estimate:.2f}" if estimate is not None else "—"
                if "seconds" not in r:
                    error = r["error"]
                    if method == "nngeometry" and name in NNGEOMETRY_NOTE:
                        error = f"{NNGEOMETRY_NOTE[name]} ({error})"
                    print_row(LABELS[name], n, f"{p:,}", method, "—", "—", "—", gflop, error)
                    continue
                notes = []
                if "picked" in r:
                    notes.append(f"picked {r['picked']}")
                if "check" in r:
                    notes.append(f"vs jacobian {r['check']:.1e}")
                ratio = f"{reference / r['seconds']:.1f}×" if reference else "—"
                print_row(
                    LABELS[name],
                    n,
                    f"{p:,}",
                    method,
                    f"{r['seconds']:.3f}",
                    ratio,
                    f"{r['peak_mb']:.0f}",
                    gflop,
                    "; ".join(notes),
                )


def main() -> None:
    args = cell_arguments(__doc__.splitlines()[0])
    if args.cell:
        job = json.loads(args.cell)
        print(json.dumps(run_cell(job["name"], job["n"], job["method"], job["repeats"], job["threads"])))
        return
    print(f"torch {torch.__version__}, {nngeometry_status()}")
    kernel_table(args)


if __name__ == "__main__":
    main()

"""Benchmark: the model Hessian, old (one run at a time, fixed steps) against new (batched, certified).

    .venv/bin/python -m bench.bench_hessian [--jobs quickstart,resnet,cnn10,table1] [--repeats 3]
                                            [--threads 2] [--device cpu|cuda] [--no-jobs]

For each job spec, on its network at w₀ and its first `hessian.probe_points` probe points:

    old   every (point, output) run in turn, one unbatched torch.func jvp(grad) product per call,
          a fixed number of Lanczos steps (tolerance 0), each reorthogonalised by two full passes:
          the engine before issue 14, kept here only
    new   ntklab.engine.curvature.hessian.model_hessian with the spec's settings (the cap `iterations`,
          `tolerance`, the memory-budgeted batch)

"Hessian phase" is the median wall time of `repeats` calls of each at w₀ (one Hessian; a job
with `at: [init, final]` makes two). "Job" runs ntklab.engine.run.run once on the spec with
each (old: run.model_hessian replaced by the old function), and reports its wall time and
summary.timings["hessian"]. Ratios are old / new in the same invocation. Both compute the same
quantity: the table shows |‖H‖_new − ‖H‖_old| / ‖H‖_new and the new certified bound.

Jobs: quickstart = examples/quickstart.json (old: 32 steps); resnet = conv blocks, width 8,
digits, 10 outputs, 200 steps, Hessian at 4 probe points (old: 32 steps); cnn10 = cnn [8, 8],
digits, 10 outputs, Hessian at 4 probe points (old: 32 steps); table1 = the Table-1 preset's
"linear head" job at m = 10⁴, cpu scale (old: its 24 steps).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.func import grad, jvp

import ntklab.engine.run as engine_run
from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.curvature.flat_parameters import FlatParameters
from ntklab.engine.curvature.hessian import HessianReport, Runs, model_hessian, report
from ntklab.engine.curvature.lanczos import LanczosRun, lanczos_many
from ntklab.engine.curvature.linear_operator import LinearOperator
from ntklab.engine.nets.network import build_network
from ntklab.engine.training.data import load_data
from ntklab.service.grid import expand_grid
from ntklab.service.presets import table1_hessian

ROOT = Path(__file__).resolve().parents[1]
DIGITS = {"kind": "builtin", "name": "digits", "n_train": 64, "probe": {"n": 16}}
HESSIAN = {"at": ["init", "final"], "probe_points": 4}


def jobs() -> dict[str, tuple[dict, int]]:
    """name -> (job document, the old fixed step count)."""
    table1 = next(
        point.spec
        for point in expand_grid(table1_hessian("cpu").base, table1_hessian("cpu").grid)
        if point.values["name"] == "linear head"
        and point.values["model.hidden"] == [10_000]
        and point.values["seed"] == 0
    )
    return {
        "quickstart": (json.loads((ROOT / "examples" / "quickstart.json").read_text()), 32),
        "resnet": (
            {
                "seed": 0,
                "data": DIGITS,
                "model": {"kind": "resnet", "block": "conv", "hidden": [8], "blocks": 2, "output_dim": 10},
                "training": {"optimizer": "gd", "max_steps": 200, "target_loss": None},
                "diagnostics": {"kernel": {"points": 20}, "hessian": HESSIAN},
                "device": "cpu",
            },
            32,
        ),
        "cnn10": (
            {
                "seed": 0,
                "data": DIGITS,
                "model": {"kind": "cnn", "hidden": [8, 8], "output_dim": 10},
                "training": {"max_steps": 200, "target_loss": None},
                "diagnostics": {"kernel": {"points": 20}, "hessian": HESSIAN},
                "device": "cpu",
            },
            32,
        ),
        "table1": (table1.model_dump(mode="json"), table1.diagnostics.hessian.iterations),
    }


def two_passes(run: LanczosRun, w: torch.Tensor) -> float:
    """The reorthogonalisation before issue 14: two full Gram–Schmidt passes at every step."""
    for _ in range(2):
        for block in run._basis():
            w -= block.T @ (block @ w)
    return float(torch.linalg.norm(w))


@contextmanager
def old_reorthogonalisation():
    new = LanczosRun._reorthogonalise
    LanczosRun._reorthogonalise = two_passes
    try:
        yield
    finally:
        LanczosRun._reorthogonalise = new


def old_model_hessian(net, x_probe, *, of="outputs", top_k=1, iterations=32, **_ignored) -> HessianReport:
    """The engine before issue 14: per run, a fixed `iterations` Lanczos steps of single jvp(grad) products,
    each step reorthogonalised twice in full."""
    with old_reorthogonalisation():
        return sequential_fixed_steps(net, x_probe, of=of, top_k=top_k, iterations=iterations)


def sequential_fixed_steps(net, x_probe, *, of: str, top_k: int, iterations: int) -> HessianReport:
    flat = FlatParameters(net)
    width = flat.output_dim(x_probe)
    runs = Runs(x_probe, width)
    units = torch.eye(width, dtype=flat.w.dtype, device=flat.w.device)
    gradient = grad(flat.output)
    generator = torch.Generator().manual_seed(0)
    ritz, grad_norms = [], []
    for r in runs.all:
        x_i, u = x_probe[r // width], units[r % width]
        with torch.no_grad():
            grad_norms.append(float(torch.linalg.norm(gradient(flat.w, x_i, u, of))))

        def products(vectors, members, x_i=x_i, u=u):
            return jvp(lambda w: gradient(w, x_i, u, of), (flat.w,), (vectors[0],))[1][None]

        operator = LinearOperator(products, flat.dim, dtype=flat.w.dtype, device=flat.w.device)
        ritz += lanczos_many(operator, steps=iterations, top_k=top_k, tolerance=0.0, generator=generator)
    return report(runs, ritz, grad_norms, "lanczos")


def network_at_init(spec: JobSpec, device: str):
    data = load_data(spec, device=device)
    net = build_network(spec.model, data.input_shape, seed=spec.seed, device=device)
    return net, data.x_probe[: spec.diagnostics.hessian.probe_points]


def median_seconds(call, repeats: int):
    seconds, value = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        value = call()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), value


def whole_job(spec: JobSpec, hessian_function) -> dict:
    engine_run.model_hessian = hessian_function
    try:
        started = time.perf_counter()
        summary = engine_run.run(spec).summary
    finally:
        engine_run.model_hessian = model_hessian
    timings = summary.get("timings") or {}
    return {
        "wall": time.perf_counter() - started,
        "hessian": timings.get("hessian"),
        "training": timings.get("training"),
    }


def bench(name: str, document: dict, old_steps: int, args) -> dict:
    spec = JobSpec.model_validate({**document, "device": args.device})
    h = spec.diagnostics.hessian
    net, x = network_at_init(spec, args.device)
    old_seconds, old = median_seconds(
        lambda: old_model_hessian(net, x, top_k=h.top_k, iterations=old_steps), args.repeats
    )
    new_seconds, new = median_seconds(
        lambda: model_hessian(net, x, top_k=h.top_k, iterations=h.iterations, tolerance=h.tolerance), args.repeats
    )
    row = {
        "job": name,
        "p": sum(t.numel() for t in net.parameters() if t.requires_grad),
        "runs": len(x) * len(new.norms[0]),
        "old_s": old_seconds,
        "new_s": new_seconds,
        "old_hvps": old.hvps,
        "new_hvps": new.hvps,
        "method": new.methods[0][0],
        "agreement": abs(new.norm - old.norm) / new.norm,
        "bound": new.norm_bound / new.norm,
    }
    if args.jobs_too:
        old_spec = spec.model_copy(
            update={
                "diagnostics": spec.diagnostics.model_copy(
                    update={"hessian": h.model_copy(update={"iterations": old_steps, "tolerance": 0.0})}
                )
            }
        )
        row["job_old"] = whole_job(old_spec, old_model_hessian)
        row["job_new"] = whole_job(spec, model_hessian)
    print(json.dumps(row), file=sys.stderr)
    return row


def table(rows: list[dict], args) -> str:
    head = [
        "job",
        "p",
        "runs",
        "method",
        "old HVPs",
        "new HVPs",
        "old (s)",
        "new (s)",
        "old / new",
        "‖H‖ old vs new",
        "new bound / ‖H‖",
    ]
    if args.jobs_too:
        head += ["job old (s)", "job new (s)", "job old / new", "Hessian in job old → new (s)", "training in job (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r["job"],
            f"{r['p']:,}",
            str(r["runs"]),
            r["method"],
            str(r["old_hvps"]),
            str(r["new_hvps"]),
            f"{r['old_s']:.3f}",
            f"{r['new_s']:.3f}",
            f"{r['old_s'] / r['new_s']:.1f}×",
            f"{r['agreement']:.1e}",
            f"{r['bound']:.1e}",
        ]
        if args.jobs_too:
            old, new = r["job_old"], r["job_new"]
            cells += [
                f"{old['wall']:.2f}",
                f"{new['wall']:.2f}",
                f"{old['wall'] / new['wall']:.1f}×",
                f"{old['hessian'] or 0:.2f} → {new['hessian'] or 0:.2f}",
                f"{new['training'] or 0:.2f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="quickstart,resnet,cnn10,table1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-jobs", dest="jobs_too", action="store_false", help="the Hessian phase only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    specs = jobs()
    rows = [bench(name, *specs[name], args) for name in args.jobs.split(",")]
    print(
        f"\n## Model Hessian: old (sequential, fixed steps) vs new (batched, certified); "
        f"{args.device}, {args.threads} torch threads, Hessian phase = median of {args.repeats} at w₀\n"
    )
    print(table(rows, args))


if __name__ == "__main__":
    main()

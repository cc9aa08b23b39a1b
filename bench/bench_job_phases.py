"""Benchmark: where a whole job's time goes (summary.timings), and its wall time against a baseline checkout.

    .venv/bin/python -m bench.bench_job_phases [--jobs quickstart,resnet] [--repeats 3] [--threads 2]
                                               [--baseline /tmp/old]

Each (job, code) runs in a fresh subprocess with `--threads` torch threads: `repeats` calls of
ntklab.engine.run.run on the job's spec, the median wall time of run() measured outside it, and the
per-phase seconds of summary.timings of the median call. With `--baseline DIR` (a checkout of an
older commit: `git worktree add /tmp/old <commit>`) the same jobs run on that code in the same
invocation, and the ratio old/new of the median wall time is printed; a baseline without
summary.timings shows its wall time only.

Jobs: quickstart = examples/quickstart.json; resnet = the issue-14 resnet (conv blocks, width 8,
digits, 10 outputs, 200 steps, Hessian at 4 probe points); table1 = the Table-1 preset's job at
m = 10⁴; cnn10 = a cnn with 10 outputs, Hessian at 4 probe points; cnn154k = issue 26's newcomer job, a
154,121-parameter 3-layer cnn on digits (10 classes) trained by 300 full-batch Adam steps on cross-entropy
with the spec's default diagnostics (what "defaults never dominate" is measured on); preset:NAME = every job of
that preset's sweep at `--scale` (service/presets.py), run one after another (their specs as
the grid set them, so a baseline that lacks a newer field refuses them).

`--step-cost`: one scheduled step's kernel and linearization error, the way the run did it
before issue 14 (a kernel pass each for the outputs and the logits, the Taylor model with its
own forward) against now (one kernel pass of the logits, the outputs' by the chain rule, one
shared forward), interleaved `--repeats` times in one process, medians: a paired comparison
that holds on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("data", "build", "kernel", "hessian", "sensitivity", "linearization", "training", "storage", "warnings")

JOBS: dict[str, dict] = {
    "quickstart": json.loads((ROOT / "examples" / "quickstart.json").read_text()),
    "resnet": {
        "seed": 0,
        "data": {"kind": "builtin", "name": "digits", "n_train": 64, "probe": {"n": 16}},
        "model": {"kind": "resnet", "block": "conv", "hidden": [8], "blocks": 2, "output_activation": "identity"},
        "training": {"optimizer": "gd", "max_steps": 200, "target_loss": None},
        "diagnostics": {"kernel": {"points": 20}, "hessian": {"at": ["init", "final"], "probe_points": 4}},
        "device": "cpu",
    },
    "table1": {
        "seed": 0,
        "data": {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 16, "classes": 2},
        "model": {"hidden": [10_000], "activation": "tanh", "output_activation": "identity"},
        "training": {"max_steps": 300, "target_loss": 1e-3},
        "diagnostics": {"kernel": {"points": 20}, "hessian": {"at": ["init", "final"], "probe_points": 4}},
        "device": "cpu",
    },
    "cnn10": {
        "seed": 0,
        "data": {"kind": "builtin", "name": "digits", "n_train": 64, "probe": {"n": 16}},
        "model": {"kind": "cnn", "hidden": [8, 8], "output_activation": "identity"},
        "training": {"max_steps": 200, "target_loss": None},
        "diagnostics": {"kernel": {"points": 20}, "hessian": {"at": ["init", "final"], "probe_points": 4}},
        "device": "cpu",
    },
    "cnn154k": {
        "seed": 0,
        "data": {"kind": "builtin", "name": "digits"},
        "model": {"kind": "cnn", "hidden": [48, 72, 95], "readout": "flatten"},
        "training": {"optimizer": "adam", "loss": "cross_entropy", "lr": 1e-3, "max_steps": 300, "target_loss": None},
        "device": "cpu",
    },
}

CHILD = """
import json, sys, time
import torch
torch.set_num_threads({threads})
from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.run import run
specs = [JobSpec.model_validate(document) for document in json.loads(sys.argv[1])]
calls = []
for _ in range({repeats}):
    wall, timings, steps, warnings = 0.0, {{}}, 0, []
    for spec in specs:
        started = time.perf_counter()
        result = run(spec)
        wall += time.perf_counter() - started
        for phase, seconds in (result.summary.get("timings") or {{}}).items():
            timings[phase] = timings.get(phase, 0.0) + seconds
        steps += result.summary["steps"]
        warnings += [warning.code for warning in getattr(result, "warnings", [])]
    calls.append((wall, timings or None, steps, warnings))
calls.sort(key=lambda call: call[0])
wall, timings, steps, warnings = calls[len(calls) // 2]
print(json.dumps({{"wall": wall, "timings": timings, "steps": steps, "warnings": warnings}}))
"""


def job_specs(job: str, scale: str) -> list[dict]:
    """The spec documents of a named job, or of every job of a preset's sweep at `scale`."""
    if not job.startswith("preset:"):
        return [JOBS[job]]
    from ntklab.service.grid import expand_grid
    from ntklab.service.presets import PRESETS

    sweep = PRESETS[job.removeprefix("preset:")].sweep(scale)
    return [point.spec.model_dump(mode="json", exclude_unset=True) for point in expand_grid(sweep.base, sweep.grid)]


def measure(root: Path, specs: list[dict], repeats: int, threads: int) -> dict:
    """One fresh interpreter on the code under `root`: the median call's wall time and timings (summed over specs)."""
    code = CHILD.format(threads=threads, repeats=repeats)
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(specs)],
        cwd=root,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    if done.returncode:
        raise SystemExit(f"{len(specs)} spec(s) on {root} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[tuple[str, dict, dict | None]]) -> str:
    head = [
        "job",
        "steps",
        *PHASES,
        "Σ phases",
        "wall (s)",
        "warnings",
        "baseline wall (s)",
        "baseline warnings",
        "old / new",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for job, new, old in rows:
        timings = new["timings"] or {}
        cells = [str(new["steps"]), *(f"{timings.get(phase, 0.0):.2f}" for phase in PHASES)]
        cells += [f"{sum(timings.values()):.2f}", f"{new['wall']:.2f}", codes(new)]
        cells += [f"{old['wall']:.2f}", codes(old), f"{old['wall'] / new['wall']:.2f}×"] if old else ["—", "—", "—"]
        lines.append(f"| {job} | " + " | ".join(cells) + " |")
        if old and old["timings"]:
            phases = [f"{old['timings'].get(phase, 0.0):.2f}" for phase in PHASES]
            lines.append(
                f"| {job} (baseline) | {old['steps']} | "
                + " | ".join(phases)
                + f" | {sum(old['timings'].values()):.2f} | {old['wall']:.2f} | {codes(old)} | — | — | — |"
            )
    return "\n".join(lines)


def codes(measured: dict) -> str:
    """The run's warning codes, or — (none, or a baseline too old to report them)."""
    return ", ".join(sorted(set(measured.get("warnings") or []))) or "—"


STEP_CASES = (
    (
        "quickstart mlp [512] swish, O = 2, n = 32",
        dict(hidden=[512], activation="tanh", output_activation="swish", output_dim=2, bias=False),
        (16,),
        32,
    ),
    (
        "cnn [8, 8] softmax, O = 10, n = 16",
        dict(kind="cnn", hidden=[8, 8], output_activation="softmax", output_dim=10),
        (1, 8, 8),
        16,
    ),
)


def step_cost_table(repeats: int, threads: int) -> str:
    """Before/after milliseconds per scheduled step (see the module docstring), and the kernels' relative difference."""
    import statistics
    import time

    import torch

    from ntklab.api_schemas.spec import model_spec
    from ntklab.engine.diagnostics.linearization import linearization_errors
    from ntklab.engine.kernels.ntk import outputs_kernel, tangent_kernel
    from ntklab.engine.nets.network import build_network, trainable_parameters

    torch.set_num_threads(threads)

    def before(net, x, w0):
        kernels = {of: tangent_kernel(net, x, of=of, method="structured") for of in ("outputs", "logits")}
        return kernels, linearization_errors(net, x, w0, trainable_parameters(net))

    def after(net, x, w0):
        with torch.no_grad():
            logits = net(x)
        K_logits = tangent_kernel(net, x, of="logits", method="structured")
        kernels = {"outputs": outputs_kernel(K_logits, logits, net.head), "logits": K_logits}
        return kernels, linearization_errors(net, x, w0, trainable_parameters(net), logits=logits)

    lines = [
        "| network, probe set | before (ms / step) | after (ms / step) | ratio | ‖ΔK‖/‖K‖ |",
        "|---|---|---|---|---|",
    ]
    for label, fields, shape, n in STEP_CASES:
        net = build_network(model_spec(**fields), shape, seed=0)
        x = torch.randn(n, *shape, generator=torch.Generator().manual_seed(0))
        w0 = {name: p.detach().clone() for name, p in trainable_parameters(net).items()}
        with torch.no_grad():
            for p in trainable_parameters(net).values():
                p.add_(0.01 * torch.randn_like(p))
        old_kernels, new_kernels = before(net, x, w0)[0], after(net, x, w0)[0]
        difference = max(
            float((old_kernels[of] - new_kernels[of]).norm() / old_kernels[of].norm()) for of in old_kernels
        )
        seconds: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(repeats):
            for name, step in (("before", before), ("after", after)):
                started = time.perf_counter()
                step(net, x, w0)
                seconds[name].append(time.perf_counter() - started)
        old, new = statistics.median(seconds["before"]), statistics.median(seconds["after"])
        lines.append(f"| {label} | {old * 1e3:.1f} | {new * 1e3:.1f} | {old / new:.2f}× | {difference:.1e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="quickstart,resnet", help=f"comma-separated, of {', '.join(JOBS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--baseline", type=Path, default=None, help="a checkout of the older code to compare with")
    parser.add_argument("--scale", default="cpu", help="the scale of preset:NAME jobs")
    parser.add_argument("--step-cost", action="store_true", help="only the per-step before/after table")
    args = parser.parse_args()
    if args.step_cost:
        print(f"\n### One scheduled step (median of {args.repeats}, {args.threads} torch threads)\n")
        print(step_cost_table(args.repeats, args.threads))
        return
    rows = []
    for job in args.jobs.split(","):
        specs = job_specs(job, args.scale)
        new = measure(ROOT, specs, args.repeats, args.threads)
        old = measure(args.baseline, specs, args.repeats, args.threads) if args.baseline else None
        rows.append((job, new, old))
        print(f"{job}: wall {new['wall']:.2f} s" + (f", baseline {old['wall']:.2f} s" if old else ""), file=sys.stderr)
    print(f"\n### Job phases (seconds, median of {args.repeats}, {args.threads} torch threads)\n")
    print(table(rows))


if __name__ == "__main__":
    main()

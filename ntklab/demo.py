"""`make demo`: reproduce the paper's Figure 1 (left), Figure 2 and Table 1 on this machine.

Starts the embedded service (SQLite + filesystem broker, two CPU workers) in
var/demo/, runs the presets `fig1-width`, `fig2-bottleneck` and `table1-hessian` through
the SDK with progress bars, prints each fit with a one-line verdict, checks the paper's
claims, writes PNG plots and report.md to ntklab-report/, and stops what it started.

    python -m ntklab.demo [--scale cpu|smoke] [--out ntklab-report] [--workers 2]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ntklab.client import Client
from ntklab.localstack import REPO, LocalStack, embedded_settings
from ntklab.resources.sweeps import Sweep

PRESETS = ("fig1-width", "fig2-bottleneck", "table1-hessian")
LABELS = {"identity": "linear head", "softmax": "softmax head", "swish": "swish head"}


@dataclass(frozen=True)
class Check:
    claim: str
    passed: bool
    measured: str


def group_label(fit: dict) -> str:
    values = [str(value) for value in fit["group"].values()]
    return ", ".join(LABELS.get(value, value) for value in values) or fit["y"]


def slope_text(fit: dict) -> str:
    if fit["slope"] is None:
        return "n/a"
    spread = "" if fit["slope_high"] is None else f" ± {fit['slope_high'] - fit['slope']:.2f}"
    return f"{fit['slope']:+.2f}{spread}"


def verdict(preset: str, fit: dict) -> str:
    """"linear head: ΔK ∝ m^-0.49 ± 0.05 → transitions to linearity"."""
    symbol = {"delta_k_max": "ΔK", "hessian_norm_init": "‖H‖"}.get(fit["y"], fit["y"])
    variable = "m_b" if fit["x"] == "model.hidden.1" else "m"
    falls = fit["slope"] is not None and fit["slope"] < -0.25
    outcome = "transitions to linearity" if falls else "stays non-linear"
    if preset == "fig2-bottleneck":
        outcome = "a wider bottleneck moves the kernel less" if falls else "the bottleneck width does not matter"
    return f"{group_label(fit)}: {symbol} ∝ {variable}^{slope_text(fit)} → {outcome}"


def by_group(sweep: Sweep) -> dict[str, dict]:
    return {group_label(fit): fit for fit in sweep.fits}


def largest_width_value(fit: dict) -> float:
    return fit["points"][-1]["y_mean"]


def checks_for(preset: str, sweep: Sweep) -> list[Check]:
    """The claims make demo must show (issue: Sweeps, scaling fits and presets)."""
    fits = by_group(sweep)
    if preset == "fig1-width":
        linear = fits["linear head"]
        result = [Check("linear head: ΔK slope vs m steeper than −0.4 with R² ≥ 0.9",
                        linear["slope"] < -0.4 and (linear["r_squared"] or 0) >= 0.9,
                        f"slope {slope_text(linear)}, R² {linear['r_squared']:.3f}")]
        for head in ("softmax head", "swish head"):
            ratio = largest_width_value(fits[head]) / largest_width_value(linear)
            result.append(Check(f"{head}: ΔK at the largest width ≥ 10× the linear head's", ratio >= 10,
                                f"{ratio:.0f}×"))
        return result
    if preset == "fig2-bottleneck":
        fit = next(iter(fits.values()))
        return [Check("ΔK slope vs bottleneck width m_b steeper than −0.4", fit["slope"] < -0.4, f"slope {slope_text(fit)}")]
    linear, swish, bottleneck = fits["linear head"], fits["swish head"], fits["bottleneck"]
    return [
        Check("linear head: ‖H‖ slope vs m in [−0.6, −0.4]", -0.6 <= linear["slope"] <= -0.4, f"slope {slope_text(linear)}"),
        Check("swish head: ‖H‖ slope vs m > −0.15", swish["slope"] > -0.15, f"slope {slope_text(swish)}"),
        Check("bottleneck: ‖H‖ slope vs m > −0.15", bottleneck["slope"] > -0.15, f"slope {slope_text(bottleneck)}"),
    ]


def fit_table(preset: str, sweep: Sweep) -> Table:
    table = Table(title=f"{preset}: {sweep.fits[0]['y']} against {sweep.fits[0]['x']}")
    table.add_column("group")
    for point in sweep.fits[0]["points"]:
        table.add_column(f"{point['x']:g}", justify="right")
    table.add_column("slope (95%)", justify="right")
    table.add_column("R²", justify="right")
    for fit in sweep.fits:
        values = [f"{p['y_mean']:.3g}" for p in fit["points"]]
        r_squared = "n/a" if fit["r_squared"] is None else f"{fit['r_squared']:.3f}"
        table.add_row(group_label(fit), *values, slope_text(fit), r_squared)
    return table


def markdown_section(preset: str, sweep: Sweep, checks: list[Check], image: str, seconds: float) -> str:
    first = sweep.fits[0]
    widths = [f"{p['x']:g}" for p in first["points"]]
    lines = [f"## {preset}", "", f"{sweep.total} jobs, {seconds:.0f} s. `{first['y']}` (mean over seeds) against "
             f"`{first['x']}`:", "", "| group | " + " | ".join(widths) + " | slope (95% CI) | R² |",
             "|---" * (len(widths) + 3) + "|"]
    for fit in sweep.fits:
        values = " | ".join(f"{p['y_mean']:.3g}" for p in fit["points"])
        r_squared = "n/a" if fit["r_squared"] is None else f"{fit['r_squared']:.3f}"
        lines.append(f"| {group_label(fit)} | {values} | {slope_text(fit)} | {r_squared} |")
    lines += ["", *[f"- {verdict(preset, fit)}" for fit in sweep.fits], ""]
    lines += [f"- {'PASS' if check.passed else 'FAIL'}: {check.claim} — measured {check.measured}" for check in checks]
    lines += ["", f"![{preset}]({image})", ""]
    return "\n".join(lines)


def run_preset(client: Client, console: Console, preset: str, scale: str, out: Path) -> tuple[str, list[Check]]:
    started = time.monotonic()
    sweep = client.presets.run(preset, scale=scale)
    console.print(f"[bold]{preset}[/] ({scale}): {sweep.total} jobs, sweep {sweep.id}")
    sweep = client.sweeps.wait(sweep.id, poll_interval=1.0, progress=True)
    seconds = time.monotonic() - started
    if sweep.status != "succeeded":
        raise SystemExit(f"{preset}: the sweep ended {sweep.status}: {sweep.counts}")
    console.print(fit_table(preset, sweep))
    for fit in sweep.fits:
        console.print("  " + verdict(preset, fit))
    checks = checks_for(preset, sweep)
    for check in checks:
        console.print(f"  [{'green' if check.passed else 'red'}]{'PASS' if check.passed else 'FAIL'}[/] {check.claim}: {check.measured}")
    image = f"{preset}.png"
    first = sweep.fits[0]
    (out / image).write_bytes(client.sweeps.plot_image(sweep.id, x=first["x"], y=first["y"], format="png"))
    return markdown_section(preset, sweep, checks, image, seconds), checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=("smoke", "cpu", "paper"), default="cpu")
    parser.add_argument("--out", type=Path, default=Path("ntklab-report"))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    console = Console()
    args.out.mkdir(parents=True, exist_ok=True)
    root = REPO / "var" / "demo"
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    settings = embedded_settings(root) | {"OMP_NUM_THREADS": "1", "NTKLAB_AUTH": "off"}
    sections, checks = [], []
    with LocalStack(settings, root / "logs") as stack:
        for _ in range(args.workers - 1):
            stack.start_worker()
        console.print(f"embedded service on {stack.url} with {args.workers} workers (logs in {root / 'logs'})")
        with Client(base_url=stack.url) as client:
            for preset in PRESETS:
                section, preset_checks = run_preset(client, console, preset, args.scale, args.out)
                sections.append(section)
                checks += preset_checks
    minutes = (time.monotonic() - started) / 60
    passed = sum(check.passed for check in checks)
    header = (f"# ntklab reproduction report ({args.scale} scale)\n\n{passed} of {len(checks)} claims hold; "
              f"{minutes:.1f} minutes in all. Made by `make demo` (python -m ntklab.demo --scale {args.scale}).\n\n")
    (args.out / "report.md").write_text(header + "\n".join(sections))
    console.print(f"\n{passed}/{len(checks)} claims hold; report and plots in {args.out}/ ({minutes:.1f} min)")
    sys.exit(0 if passed == len(checks) else 1)


if __name__ == "__main__":
    main()

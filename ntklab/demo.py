"""`make demo`: reproduce the paper's Figure 1 (left), Figure 2 and Table 1 on this machine.

Starts the embedded service (SQLite + filesystem broker, two CPU workers) in
var/demo/, runs the presets `fig1-width`, `fig2-bottleneck` and `table1-hessian` through
the SDK with progress bars, prints each fit with a one-line verdict, checks the paper's
claims, writes the plots (PNG, with PDF and SVG beside each) and report.md to ntklab-report/,
and stops what it started.

    python -m ntklab.demo [--scale cpu|smoke] [--out ntklab-report] [--workers 2] [--presets a,b]
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

from ntklab.analysis.figure_titles import figure_title
from ntklab.client import Client
from ntklab.localstack import LocalStack, embedded_settings
from ntklab.resources.sweeps import Sweep
from ntklab.terminal import stdout_console

DEMO_PRESETS = ("fig1-width", "fig2-bottleneck", "table1-hessian")
LABELS = {"identity": "linear head", "softmax": "softmax head", "swish": "swish head"}
SYMBOLS = {
    "delta_k_max": "ΔK",
    "hessian_norm_init": "‖H‖",
    "hessian_kernel_ratio_init": "‖H‖/K",
    "weight_change_l2": "‖w*−w₀‖₂",
    "weight_change_linf": "‖w*−w₀‖_∞",
}
SMALL, LARGE = 1e-2, 1e4
"""A table value outside [SMALL, LARGE) in magnitude is written in scientific form."""


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
    """ "linear head: ΔK ∝ m^-0.49 ± 0.05 → transitions to linearity"."""
    symbol = SYMBOLS.get(fit["y"], fit["y"])
    variable = "m_b" if fit["x"] == "model.hidden.1" and preset == "fig2-bottleneck" else "m"
    falls = fit["slope"] is not None and fit["slope"] < -0.25
    if preset == "fig2-bottleneck":
        outcome = "a wider bottleneck moves the kernel less" if falls else "the bottleneck width does not matter"
    elif fit["y"].startswith("weight_change"):
        outcome = "shrinks with width" if falls else "does not shrink with width"
    else:
        outcome = "transitions to linearity" if falls else "stays non-linear"
    return f"{group_label(fit)}: {symbol} ∝ {variable}^{slope_text(fit)} → {outcome}"


def by_group(sweep: Sweep, y: str | None = None) -> dict[str, dict]:
    return {group_label(fit): fit for fit in sweep.fits if y is None or fit["y"] == y}


def largest_width_value(fit: dict) -> float:
    return fit["points"][-1]["y_mean"]


def checks_for(preset: str, sweep: Sweep) -> list[Check]:
    """The claims make demo must show (issue: Sweeps, scaling fits and presets)."""
    fits = by_group(sweep)
    if preset == "fig1-width":
        linear = fits["linear head"]
        result = [
            Check(
                "linear head: ΔK slope vs m steeper than −0.4 with R² ≥ 0.9",
                linear["slope"] < -0.4 and (linear["r_squared"] or 0) >= 0.9,
                f"slope {slope_text(linear)}, R² {linear['r_squared']:.3f}",
            )
        ]
        for head in ("softmax head", "swish head"):
            ratio = largest_width_value(fits[head]) / largest_width_value(linear)
            result.append(
                Check(f"{head}: ΔK at the largest width ≥ 10× the linear head's", ratio >= 10, f"{ratio:.0f}×")
            )
        return result
    if preset == "fig2-bottleneck":
        fit = next(iter(fits.values()))
        return [
            Check("ΔK slope vs bottleneck width m_b steeper than −0.4", fit["slope"] < -0.4, f"slope {slope_text(fit)}")
        ]
    if preset == "param-check":
        ratio = by_group(sweep, "hessian_kernel_ratio_init")
        ntk, standard, meanfield = ratio["ntk"], ratio["standard"], ratio["meanfield"]
        return [
            Check(
                "ntk and standard: ‖H‖/K slopes agree within 0.1",
                abs(ntk["slope"] - standard["slope"]) < 0.1,
                f"{slope_text(ntk)} vs {slope_text(standard)}",
            ),
            Check(
                "meanfield: ‖H‖/K slope differs from ntk's by more than 0.3",
                abs(meanfield["slope"] - ntk["slope"]) > 0.3,
                f"{slope_text(meanfield)} vs {slope_text(ntk)}",
            ),
        ]
    if preset == "lazy-is-not-small":
        l2, linf = (
            by_group(sweep, "weight_change_l2")["weight_change_l2"],
            by_group(sweep, "weight_change_linf")["weight_change_linf"],
        )
        return [
            Check("‖w*−w₀‖₂ does not shrink with m (|slope| < 0.1)", abs(l2["slope"]) < 0.1, f"slope {slope_text(l2)}"),
            Check("‖w*−w₀‖_∞ shrinks with m (slope < −0.3)", linf["slope"] < -0.3, f"slope {slope_text(linf)}"),
        ]
    if preset != "table1-hessian":
        return []
    linear, swish, bottleneck = fits["linear head"], fits["swish head"], fits["bottleneck"]
    return [
        Check(
            "linear head: ‖H‖ slope vs m in [−0.6, −0.4]",
            -0.6 <= linear["slope"] <= -0.4,
            f"slope {slope_text(linear)}",
        ),
        Check("swish head: ‖H‖ slope vs m > −0.15", swish["slope"] > -0.15, f"slope {slope_text(swish)}"),
        Check("bottleneck: ‖H‖ slope vs m > −0.15", bottleneck["slope"] > -0.15, f"slope {slope_text(bottleneck)}"),
    ]


def fits_by_y(sweep: Sweep) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for fit in sweep.fits:
        grouped.setdefault(fit["y"], []).append(fit)
    return grouped


def columns(fits: list[dict]) -> list[float]:
    return sorted({point["x"] for fit in fits for point in fit["points"]})


def value_text(value: float) -> str:
    """Three significant digits, in scientific form below 0.01 and from 10⁴ on: 0.159, 5.02e-04, 1.23e+05."""
    if value != 0 and not SMALL <= abs(value) < LARGE:
        return f"{value:.2e}"
    return f"{value:.3g}"


def fit_rows(fits: list[dict]) -> list[list[str]]:
    """One row per group: the seed-mean of y at every x, the slope with its 95% interval, R²."""
    xs = columns(fits)
    rows = []
    for fit in fits:
        means = {point["x"]: point["y_mean"] for point in fit["points"]}
        values = [value_text(means[x]) if x in means else "—" for x in xs]
        r_squared = "n/a" if fit["r_squared"] is None else f"{fit['r_squared']:.3f}"
        rows.append([group_label(fit), *values, slope_text(fit), r_squared])
    return rows


def fit_table(y: str, fits: list[dict]) -> Table:
    """The fit rows as a rich table whose cells fold onto a second line on a narrow terminal, never cut with an ellipsis."""
    table = Table(title=f"{y} against {fits[0]['x']} (mean over seeds)")
    for header in ["group", *(f"{x:g}" for x in columns(fits)), "slope (95%)", "R²"]:
        table.add_column(header, justify="left" if header == "group" else "right", overflow="fold")
    for row in fit_rows(fits):
        table.add_row(*row)
    return table


def markdown_table(y: str, fits: list[dict]) -> list[str]:
    headers = ["group", *(f"{x:g}" for x in columns(fits)), "slope (95% CI)", "R²"]
    return [
        f"`{y}` against `{fits[0]['x']}` (mean over seeds):",
        "",
        "| " + " | ".join(headers) + " |",
        "|---" * len(headers) + "|",
        *("| " + " | ".join(row) + " |" for row in fit_rows(fits)),
        "",
    ]


def time_series_figure(client: Client, sweep: Sweep, path: Path) -> list[str]:
    """ΔK(t) of every job (the paper's Figure 1, right); returns one line per job with its final ΔK."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ntklab.plots import save_figure

    figure, axes = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    lines = []
    for row in sweep.table:
        series = client.jobs.metrics(row.job_id, ["delta_k"])["delta_k"]
        steps, values = series
        label = ", ".join(f"{LABELS.get(str(v), v)}" for v in row.values.values())
        axes.plot(steps, values, label=label)
        lines.append(f"{label}: ΔK at the end {values[-1]:.3g}, max {row.summary['delta_k_max']:.3g}")
    axes.set_xlabel("step")
    axes.set_ylabel("ΔK(t) = ‖K(w_t) − K(w₀)‖_F / ‖K(w₀)‖_F")
    axes.set_xscale("symlog", linthresh=1)
    axes.grid(True, alpha=0.3)
    axes.legend()
    axes.set_title(figure_title(sweep.name, sweep.tags), parse_math=False)
    figure.tight_layout()
    save_figure(figure, str(path))
    plt.close(figure)
    return lines


def report_preset(
    client: Client, console: Console, preset: str, sweep: Sweep, out: Path
) -> tuple[list[str], list[Check]]:
    """Print the preset's tables, verdicts and checks; save its plot; return its Markdown lines and checks."""
    image = f"{preset}.png"
    lines: list[str] = []
    if not sweep.fits:
        for line in time_series_figure(client, sweep, out / image):
            console.print("  " + line)
            lines.append(f"- {line}")
    for y, fits in fits_by_y(sweep).items():
        console.print(fit_table(y, fits))
        lines += markdown_table(y, fits)
    verdicts = [verdict(preset, fit) for fit in sweep.fits]
    checks = checks_for(preset, sweep)
    results = [f"{'PASS' if check.passed else 'FAIL'}: {check.claim} — measured {check.measured}" for check in checks]
    warned = warning_lines(sweep)
    for text in [*verdicts, *results, *warned]:
        console.print("  " + text)
    if sweep.fits:
        sweep.plot(path=str(out / image))  # the service's drawing: every fit of the first x, one panel per y
    lines += ["", *(f"- {text}" for text in verdicts + results + warned), "", f"![{preset}]({image})", ""]
    return lines, checks


def warning_lines(sweep: Sweep) -> list[str]:
    """ "WARNING (fit or job): message" for each fit's warnings, or each job's where the sweep has no fit."""
    if sweep.fits:
        return [
            f"WARNING ({fit['y']}{', ' + group_label(fit) if fit['group'] else ''}): {warning['message']}"
            for fit in sweep.fits
            for warning in fit.get("warnings", [])
        ]
    return [f"WARNING ({row.job_id}): {warning.message}" for row in sweep.table for warning in row.warnings]


def run_preset(client: Client, console: Console, preset: str, scale: str, out: Path) -> tuple[str, list[Check]]:
    started = time.monotonic()
    sweep = client.presets.run(preset, scale=scale)
    console.print(f"[bold]{preset}[/] ({scale}): {sweep.total} jobs, sweep {sweep.id}")
    sweep = client.sweeps.wait(sweep.id, poll_interval=1.0, progress=True)
    if sweep.status != "succeeded":
        raise SystemExit(f"{preset}: the sweep ended {sweep.status}: {sweep.counts}")
    lines, checks = report_preset(client, console, preset, sweep, out)
    header = [f"## {preset}", "", f"{sweep.total} jobs, {time.monotonic() - started:.0f} s.", ""]
    return "\n".join(header + lines), checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=("smoke", "cpu", "paper"), default="cpu")
    parser.add_argument("--out", type=Path, default=Path("ntklab-report"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--presets", default=",".join(DEMO_PRESETS), help="comma-separated preset names")
    args = parser.parse_args()
    console = stdout_console()
    args.out.mkdir(parents=True, exist_ok=True)
    root = Path("var") / "demo"
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    settings = embedded_settings(root) | {"OMP_NUM_THREADS": "1", "NTKLAB_AUTH": "off"}
    sections, checks = [], []
    with LocalStack(settings, root / "logs", workers=args.workers) as stack:
        console.print(f"embedded service on {stack.url} with {args.workers} workers (logs in {root / 'logs'})")
        with Client(base_url=stack.url) as client:
            for preset in args.presets.split(","):
                section, preset_checks = run_preset(client, console, preset, args.scale, args.out)
                sections.append(section)
                checks += preset_checks
    minutes = (time.monotonic() - started) / 60
    passed = sum(check.passed for check in checks)
    header = (
        f"# ntklab reproduction report ({args.scale} scale)\n\n{passed} of {len(checks)} claims hold; "
        f"{minutes:.1f} minutes in all. Made by `make demo` (python -m ntklab.demo --scale {args.scale}).\n\n"
    )
    (args.out / "report.md").write_text(header + "\n".join(sections))
    console.print(f"\n{passed}/{len(checks)} claims hold; report and plots in {args.out}/ ({minutes:.1f} min)")
    sys.exit(0 if passed == len(checks) else 1)


if __name__ == "__main__":
    main()

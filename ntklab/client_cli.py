"""The client's commands: submit, estimate, status, wait, metrics, artifact, cancel, list, sweep, sweeps …,
preset, presets. They talk to a service through the SDK and need only `pip install ntklab`; the
server launcher's commands are in ntklab/server_cli.py, and ntklab/cli.py makes one `ntklab` of both.

For scripts, every command but `worker` takes `--json`: stdout then holds exactly one JSON
document — the job, sweep, list or result; on a failure {"error": {...}} with the problem's
fields — and nothing else, while messages and progress go to stderr. For people, tables go to
stdout and never wrap or cut an id: an id column is as wide as its longest id, and when stdout
is not a terminal (a pipe, a file) every line is printed as wide as it needs.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, ParamSpec, cast

import typer
from rich.table import Table
from rich.text import Text

from ntklab import client as ntklab_client
from ntklab import errors
from ntklab.cli_output import (
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    JsonOption,
    emit,
    fail,
    field_lines,
    note,
    say,
    timings_text,
)
from ntklab.resources import Job, JobDryRun, Sweep
from ntklab.resources.presets import Scale
from ntklab.terminal import stdout_console

app = typer.Typer()
sweeps_app = typer.Typer(name="sweeps", no_args_is_help=True, help="Find sweeps again: list, show, table, plot.")
app.add_typer(sweeps_app)

SHOWN_WITH_THE_JOB = ("device",)
"""Summary scalars `status` already shows as rows of their own."""


# ----------------------------------------------------------------------------- output

UrlOption = Annotated[
    str | None, typer.Option("--url", envvar="NTKLAB_URL", help="service URL [default: http://127.0.0.1:8000]")
]
KeyOption = Annotated[str | None, typer.Option("--api-key", envvar="NTKLAB_API_KEY", help="sent as X-API-Key")]
WaitOption = Annotated[bool, typer.Option("--wait", help="follow to the end and print the result")]


def _finite(value: Any) -> Any:
    """NaN and ±inf as null, as the service writes them."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _id_table(*columns: str, ids: Iterable[str]) -> Table:
    """A table whose first column, "id", is never wrapped or cut: as wide as its longest id."""
    table = Table()
    table.add_column(columns[0], no_wrap=True, min_width=max((len(i) for i in ids), default=0))
    for column in columns[1:]:
        table.add_column(column)
    return table


def _problem(error: errors.APIStatusError) -> tuple[str, dict[str, Any]]:
    """A 4xx answer for people (status, title, each field once) and for --json (the problem's fields)."""
    lines = field_lines(error.errors)
    head = f"{error.status} {error.title}" + ("" if lines or not error.detail else f": {error.detail}")
    document = {
        "status": error.status,
        "type": error.type,
        "title": error.title,
        "detail": error.detail,
        "errors": error.errors,
    }
    return "\n".join([head, *lines]), document


P = ParamSpec("P")


def _exits(command: Callable[P, None]) -> Callable[P, None]:
    """Map SDK failures to the exit codes: 1 job failed, 2 usage error, 3 service unreachable."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        as_json = bool(kwargs.get("as_json", False))
        try:
            return command(*args, **kwargs)
        except errors.JobFailedError as failure:
            _show_job(failure.job, as_json)
            fail(str(failure), EXIT_FAILED, as_json=False)
        except (errors.APIConnectionError, errors.InternalServerError) as error:
            fail(f"the ntklab service is unreachable: {error}", EXIT_UNREACHABLE, as_json)
        except errors.APIStatusError as error:
            message, document = _problem(error)
            fail(message, EXIT_USAGE, as_json, document)
        except (OSError, ValueError) as error:
            fail(str(error), EXIT_USAGE, as_json)

    return run


# ----------------------------------------------------------------------------- jobs


def _client(url: str | None, api_key: str | None) -> ntklab_client.Client:
    return ntklab_client.Client(base_url=url, api_key=api_key)


def _cell(value: Any, name: str = "") -> str:
    if name == "timings" and isinstance(value, dict):
        return timings_text(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _show_job(job: Job, as_json: bool = False) -> None:
    """A job, each field once: id, status, progress, device, attempts, error, warnings, then the summary."""
    if as_json:
        emit(job.model_dump(mode="json"))
        return
    table = Table(show_header=False)
    table.add_column("field", no_wrap=True)
    table.add_column("value", min_width=len(job.id))
    table.add_row("id", job.id)
    if job.name:
        table.add_row("name", job.name)
    table.add_row("status", job.status)
    table.add_row("progress", f"{job.progress.step}/{job.progress.total} {job.progress.phase}")
    table.add_row("device", str(job.device))
    table.add_row("attempts", str(job.attempts))
    if job.error:
        table.add_row("error", f"{job.error.type}: {job.error.message}")
    for warning in job.warnings:
        table.add_row("warning", f"{warning.code}: {warning.message}")
    for name, value in (job.summary or {}).items():
        if name not in SHOWN_WITH_THE_JOB:
            table.add_row(name, _cell(value, name))
    stdout_console().print(table)


def _submit(spec: Path, wait: bool, url: str | None, api_key: str | None, as_json: bool) -> None:
    with _client(url, api_key) as client:
        job = client.jobs.create(spec)
        say(f"submitted {job.id}", as_json)
        _show_job(client.jobs.wait(job.id, progress=not as_json) if wait else job, as_json)


@app.command()
@_exits
def submit(
    spec: Path, wait: WaitOption = False, url: UrlOption = None, api_key: KeyOption = None, as_json: JsonOption = False
) -> None:
    """Submit a job spec (.json/.yaml) to the service."""
    _submit(spec, wait, url, api_key, as_json)


def _show_estimate(estimate: JobDryRun, as_json: bool) -> None:
    """A dry run for people: the phases by estimated seconds and their total, with a column per worker class
    calibrated by its measured throughput (seconds and the factor; "rates" where a phase is uncalibrated), then
    the peak memory, the rates and where they come from, what the calibration rests on, and each estimate cap
    with the share of it used."""
    if as_json:
        emit(estimate.model_dump(mode="json"))
        return
    from ntklab.planner.estimate import format_bytes

    classes = estimate.by_worker_class
    table = Table(
        "phase",
        "seconds",
        *(f"{name} s (× factor)" for name in classes),
        "FLOPs",
        "operations",
        title="estimate (nothing submitted)",
    )
    calibrated = {name: {phase.name: phase for phase in worker.phases} for name, worker in classes.items()}
    for phase in estimate.phases:
        cells = []
        for name in classes:
            found = calibrated[name].get(phase.name)
            cells.append(
                ""
                if found is None
                else f"{found.seconds:.3g} " + ("(rates)" if found.factor is None else f"(×{found.factor:.2g})")
            )
        table.add_row(phase.name, f"{phase.seconds:.3g}", *cells, f"{phase.flops:.3g}", f"{phase.operations:.3g}")
    table.add_section()
    table.add_row(
        "total",
        f"{estimate.seconds:.3g}",
        *(f"{worker.seconds:.3g}" for worker in classes.values()),
        f"{estimate.flops:.3g}",
        "",
    )
    stdout_console().print(table)
    rates = estimate.rates
    say(f"peak memory {format_bytes(estimate.memory_bytes)}, {estimate.parameters} trainable parameters", False)
    if rates is not None:
        say(
            f"rates {rates.flops_per_s:.3g} FLOP/s and {rates.seconds_per_op:.3g} s per operation, {rates.source}: "
            f"{rates.detail}",
            False,
        )
    for name, worker in classes.items():
        say(f"{name}: calibrated by {worker.jobs} succeeded jobs on {', '.join(worker.devices)}", False)
    if estimate.calibration:
        say(f"calibration: {estimate.calibration}", False)
    for cap in estimate.caps:
        say(f"{cap.setting}: {cap.value:.4g} of {cap.limit:.4g} ({100 * cap.value / cap.limit:.2g} %)", False)


@app.command()
@_exits
def estimate(spec: Path, url: UrlOption = None, api_key: KeyOption = None, as_json: JsonOption = False) -> None:
    """What a job spec (.json/.yaml) would cost, per phase, from the service's dry run; nothing is submitted."""
    with _client(url, api_key) as client:
        _show_estimate(client.jobs.estimate(spec), as_json)


@app.command()
@_exits
def status(job_id: str, url: UrlOption = None, api_key: KeyOption = None, as_json: JsonOption = False) -> None:
    """Show a job: status, progress, warnings and summary."""
    with _client(url, api_key) as client:
        _show_job(client.jobs.retrieve(job_id), as_json)


@app.command()
@_exits
def wait(job_id: str, url: UrlOption = None, api_key: KeyOption = None, as_json: JsonOption = False) -> None:
    """Follow a job to the end; exit 1 if it failed or was cancelled."""
    with _client(url, api_key) as client:
        _show_job(client.jobs.wait(job_id, progress=not as_json), as_json)


@app.command()
@_exits
def metrics(
    job_id: str,
    name: Annotated[
        list[str] | None, typer.Option("--name", "-n", help="series to show (repeat); all if absent")
    ] = None,
    csv: Annotated[bool, typer.Option("--csv", help="print name,step,value rows")] = False,
    url: UrlOption = None,
    api_key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print a job's metric series."""
    with _client(url, api_key) as client:
        series = client.jobs.metrics(job_id, name)
    if as_json:
        emit(
            {
                key: {"step": steps.tolist(), "value": [_finite(v) for v in values.tolist()]}
                for key, (steps, values) in series.items()
            }
        )
        return
    if csv:
        print("name,step,value")
        for key, (steps, values) in series.items():
            for step, value in zip(steps.tolist(), values.tolist()):
                print(f"{key},{step},{'' if value != value else repr(value)}")
        return
    table = Table("series", "points", "first step", "last step", "last value")
    for key, (steps, values) in series.items():
        table.add_row(
            key,
            str(len(steps)),
            str(steps[0]) if len(steps) else "",
            str(steps[-1]) if len(steps) else "",
            f"{values[-1]:.6g}" if len(values) else "",
        )
    stdout_console().print(table)


@app.command()
@_exits
def artifact(
    job_id: str,
    name: str,
    output: Annotated[Path, typer.Option("--output", "-o", help="file to write")],
    url: UrlOption = None,
    api_key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Download an artifact (kernel .npy, weights .npz, .json) as stored, streamed to the file."""
    with _client(url, api_key) as client:
        size = client.jobs.download_to(job_id, name, output)
    if as_json:
        emit({"job_id": job_id, "name": name, "path": str(output), "bytes": size})
        return
    note(f"wrote {size} bytes to {output}")


@app.command()
@_exits
def cancel(job_id: str, url: UrlOption = None, api_key: KeyOption = None, as_json: JsonOption = False) -> None:
    """Cancel a job; a running one stops within seconds."""
    with _client(url, api_key) as client:
        _show_job(client.jobs.cancel(job_id), as_json)


StatusOption = Annotated[
    list[str] | None, typer.Option("--status", help="queued, running, succeeded, failed, cancelled (repeat)")
]
LimitOption = Annotated[int, typer.Option("--limit", min=1, help="show at most this many")]
LIST_PAGE_SIZE = 200
"""Rows a list command asks for per request: the service's default page size limit (max_page_size)."""


def _first(list_call: Callable[..., Iterable[Any]], limit: int, **filters: Any) -> list[Any]:
    """The first `limit` items of a paged SDK list call, read in pages of at most LIST_PAGE_SIZE."""
    return list(itertools.islice(list_call(**filters, limit=min(limit, LIST_PAGE_SIZE)), limit))


@app.command("list")
@_exits
def list_jobs(
    status: StatusOption = None,
    tag: Annotated[str | None, typer.Option("--tag")] = None,
    limit: LimitOption = 20,
    url: UrlOption = None,
    api_key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """List jobs, newest first."""
    with _client(url, api_key) as client:
        jobs = _first(client.jobs.list, limit, status=status, tag=tag)
    if as_json:
        emit([job.model_dump(mode="json") for job in jobs])
        return
    table = _id_table("id", "name", "status", "progress", "created", ids=(job.id for job in jobs))
    for job in jobs:
        table.add_row(
            job.id,
            job.name or "",
            job.status,
            f"{job.progress.step}/{job.progress.total}",
            job.created_at.isoformat(timespec="seconds"),
        )
    stdout_console().print(table)


# ----------------------------------------------------------------------------- sweeps and presets


def _grid(sweep: Sweep) -> list[str]:
    """The sweep's grid axes as submitted (a linked axis is "a,b")."""
    grid = sweep.spec.get("grid")
    return list(grid) if isinstance(grid, dict) else []


def _show_sweep(sweep: Sweep, as_json: bool) -> None:
    """A sweep: its status and job counts, what its grid varies, and one verdict per fitted group."""
    if as_json:
        emit(sweep.model_dump(mode="json"))
        return
    out = stdout_console()
    counts = ", ".join(f"{count} {status}" for status, count in sweep.counts.items() if count)
    named = f" ({sweep.name})" if sweep.name else ""
    out.print(Text(f"sweep {sweep.id}{named} {sweep.status}: {counts or 'no jobs'} (of {sweep.total})"))
    out.print(Text(f"  grid: {', '.join(_grid(sweep))}"))
    for fit in sweep.fits:
        out.print(Text(f"  {fit['verdict']}"))
        for warning in fit.get("warnings", []):
            out.print(Text(f"    warning {warning['code']}: {warning['message']}"))


def _follow_sweep(client: ntklab_client.Client, sweep: Sweep, wait: bool, as_json: bool) -> None:
    say(f"submitted sweep {sweep.id} ({sweep.total} jobs); follow it with: ntklab sweeps show {sweep.id}", as_json)
    if wait:
        sweep = client.sweeps.wait(sweep.id, progress=not as_json)
    _show_sweep(sweep, as_json)
    if wait and sweep.status != "succeeded":
        raise typer.Exit(EXIT_FAILED)


@app.command()
@_exits
def sweep(
    spec: Path, wait: WaitOption = False, url: UrlOption = None, api_key: KeyOption = None, as_json: JsonOption = False
) -> None:
    """Submit a sweep spec {name, base, grid, fits} (.json/.yaml)."""
    with _client(url, api_key) as client:
        _follow_sweep(client, client.sweeps.create(spec), wait, as_json)


@app.command()
@_exits
def preset(
    name: str,
    scale: Annotated[str, typer.Option("--scale", help="smoke | cpu | paper")] = "smoke",
    wait: WaitOption = False,
    url: UrlOption = None,
    api_key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run one of the paper's experiments (fig1-width, fig2-bottleneck, table1-hessian, …) as a sweep."""
    with _client(url, api_key) as client:
        # the service judges the scale: another word is a 422 naming `scale`
        _follow_sweep(client, client.presets.run(name, scale=cast(Scale, scale)), wait, as_json)


@app.command()
@_exits
def presets(url: UrlOption = None, api_key: KeyOption = None, as_json: JsonOption = False) -> None:
    """The paper's experiments `ntklab preset NAME` runs, with the jobs each scale makes."""
    with _client(url, api_key) as client:
        found = client.presets.list()
    if as_json:
        emit([item.model_dump(mode="json") for item in found])
        return
    table = _id_table("name", "jobs (smoke/cpu/paper)", "title", ids=(item.name for item in found))
    for item in found:
        table.add_row(
            item.name, "/".join(str(item.jobs.get(scale, "")) for scale in ("smoke", "cpu", "paper")), item.title
        )
    stdout_console().print(table)


@sweeps_app.command("list")
@_exits
def list_sweeps(
    status: Annotated[
        list[str] | None,
        typer.Option("--status", help="queued, running, succeeded, failed, cancelled, partial (repeat)"),
    ] = None,
    tag: Annotated[str | None, typer.Option("--tag", help="a tag of the sweep (a preset's name for a preset)")] = None,
    limit: LimitOption = 20,
    url: UrlOption = None,
    api_key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """List sweeps, newest first."""
    with _client(url, api_key) as client:
        found = _first(client.sweeps.list, limit, status=status, tag=tag)
    if as_json:
        emit([item.model_dump(mode="json") for item in found])
        return
    table = _id_table("id", "name", "status", "done", "axes", "created", ids=(item.id for item in found))
    for item in found:
        done = item.total - item.counts.get("queued", 0) - item.counts.get("running", 0)
        table.add_row(
            item.id,
            item.name or "",
            item.status,
            f"{done}/{item.total}",
            ", ".join(item.axes),
            item.created_at.isoformat(timespec="seconds"),
        )
    stdout_console().print(table)


@sweeps_app.command("show")
@_exits
def show_sweep(sweep_id: str, url: UrlOption = None, api_key: KeyOption = None, as_json: JsonOption = False) -> None:
    """A sweep's status, job counts and fits (its first page of rows with --json)."""
    with _client(url, api_key) as client:
        _show_sweep(client.sweeps.retrieve(sweep_id), as_json)


@sweeps_app.command("table")
@_exits
def sweep_table(
    sweep_id: str,
    column: Annotated[
        list[str] | None,
        typer.Option(
            "--column",
            "-c",
            help="summary scalar to show (repeat); default: the fits' y, else delta_k_max and final_loss",
        ),
    ] = None,
    csv: Annotated[
        bool, typer.Option("--csv", help="every row as CSV: job_id, status, grid values and every summary scalar")
    ] = False,
    url: UrlOption = None,
    api_key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every row of a sweep's table (all pages): a job's grid values and summary scalars."""
    with _client(url, api_key) as client:
        sweep = client.sweeps.retrieve(sweep_id, limit=1)
        rows = list(client.sweeps.iter_rows(sweep_id))
    if as_json:
        emit(rows)
        return
    axes = [path for axis in _grid(sweep) for path in axis.split(",")]
    if csv:
        _print_csv(rows)
        return
    shown = column or list(dict.fromkeys(fit["y"] for fit in sweep.fits)) or ["delta_k_max", "final_loss"]
    table = _id_table("job_id", "status", *axes, *shown, ids=(row["job_id"] for row in rows))
    for row in rows:
        table.add_row(row["job_id"], row["status"], *(_cell(row.get(name)) for name in (*axes, *shown)))
    stdout_console().print(table)


def _print_csv(rows: list[dict[str, Any]]) -> None:
    import csv as csv_module

    names = list(dict.fromkeys(name for row in rows for name in row))
    writer = csv_module.DictWriter(sys.stdout, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    writer.writerows({name: _csv_value(row.get(name)) for name in names} for row in rows)


def _csv_value(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (dict, list)) else ("" if value is None else value)


@sweeps_app.command("plot")
@_exits
def plot_sweep(
    sweep_id: str,
    output: Annotated[Path, typer.Option("--output", "-o", help="image to write: .png or .svg")],
    x: Annotated[str | None, typer.Option("--x", help="grid path on the x axis; default: the first fit's")] = None,
    y: Annotated[str | None, typer.Option("--y", help="summary scalar on the y axis; default: the first fit's")] = None,
    url: UrlOption = None,
    api_key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """The service's log–log plot of a sweep's fit (as GET /v1/sweeps/{id}/plot draws it)."""
    image_format = output.suffix.lower().removeprefix(".")
    if image_format not in ("png", "svg"):
        raise ValueError(f"{output}: the plot is written as .png or .svg")
    with _client(url, api_key) as client:
        data = client.sweeps.plot_image(sweep_id, x=x, y=y, format=image_format)
    output.write_bytes(data)
    if as_json:
        emit({"sweep_id": sweep_id, "path": str(output), "format": image_format, "bytes": len(data)})
        return
    note(f"wrote {len(data)} bytes to {output}")

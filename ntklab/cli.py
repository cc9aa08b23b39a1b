"""The `ntklab` command line.

The client commands (submit, status, wait, metrics, artifact, cancel, list, sweep, preset,
`run` against a service) need only `pip install ntklab`. The server commands (up, migrate,
worker, keys, `run --local`) import their parts when run, and say which extra to install
when it is missing.
"""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from api_schemas.spec import JobSpec
from ntklab import client as ntklab_client
from ntklab import errors
from ntklab.admin import keys_app
from ntklab.extras import needs

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Tangent-kernel and Hessian diagnostics.")
err = Console(stderr=True)
app.add_typer(keys_app)


@app.callback()
def main() -> None:
    """Tangent-kernel and Hessian diagnostics: is your network in the linear regime, and why?"""


@app.command("run")
def run_command(
    spec_path: Path = typer.Argument(..., exists=True, dir_okay=False, help="Job spec (JSON)."),
    local: bool = typer.Option(False, "--local", help="Run the engine in this process, without the service."),
    out: Path = typer.Option(Path("ntklab-out"), "--out", help="Directory for summary.json, metrics.json and artifacts."),
) -> None:
    """Run one job. Exit 0 on success, 2 on a bad spec, 1 if the run fails."""
    if not local:
        submit(spec_path, wait=True, url=None, api_key=None)
        return
    try:
        spec = JobSpec.model_validate(json.loads(spec_path.read_text()))
    except json.JSONDecodeError as exc:
        err.print(f"[red]{spec_path}: not JSON: {exc}[/red]")
        raise typer.Exit(2)
    except ValidationError as exc:
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"]) or "(spec)"
            err.print(f"[red]{field}[/red]: {error['msg']}")
        raise typer.Exit(2)
    needs("worker", purpose="ntklab run --local")
    from ntklab.local import run_local

    try:
        result = run_local(spec, out)
    except Exception as exc:  # noqa: BLE001 - any engine failure is exit 1 with its message
        err.print(f"[red]run failed: {type(exc).__name__}: {exc}[/red]")
        raise typer.Exit(1)
    s = result.summary
    err.print(f"{s['outcome']} after {s['steps']} steps: loss {s['final_loss']}, delta_k_max {s['delta_k_max']} → {out}")


# ----------------------------------------------------------------------------- service commands (SDK)

UrlOption = Annotated[Optional[str], typer.Option("--url", envvar="NTKLAB_URL", help="service URL [default: http://127.0.0.1:8000]")]
KeyOption = Annotated[Optional[str], typer.Option("--api-key", envvar="NTKLAB_API_KEY", help="sent as X-API-Key")]
WaitOption = Annotated[bool, typer.Option("--wait", help="follow to the end and print the result")]
EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3


def _client(url: str | None, api_key: str | None) -> "ntklab_client.Client":
    return ntklab_client.Client(base_url=url, api_key=api_key)


def _exits(command):
    """Map SDK failures to the exit codes: 1 job failed, 2 usage error, 3 service unreachable."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except errors.JobFailedError as failure:
            _show_job(failure.job)
            _fail(str(failure), EXIT_FAILED)
        except (errors.APIConnectionError, errors.InternalServerError) as error:
            _fail(f"the ntklab service is unreachable: {error}", EXIT_UNREACHABLE)
        except errors.APIStatusError as error:
            _fail(str(error), EXIT_USAGE)
        except (OSError, ValueError) as error:
            _fail(str(error), EXIT_USAGE)

    return run


def _fail(message: str, code: int) -> NoReturn:
    Console(stderr=True).print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def _show_job(job) -> None:
    table = Table(title=f"{job.id}  {job.name or ''}".strip(), show_header=False)
    table.add_row("status", job.status)
    table.add_row("progress", f"{job.progress.step}/{job.progress.total} {job.progress.phase}")
    table.add_row("device", str(job.device))
    table.add_row("attempts", str(job.attempts))
    if job.error:
        table.add_row("error", f"{job.error.type}: {job.error.message}")
    for name, value in (job.summary or {}).items():
        table.add_row(name, f"{value:.6g}" if isinstance(value, float) else str(value))
    Console().print(table)


def _submit(spec: Path, wait: bool, url: str | None, api_key: str | None) -> None:
    with _client(url, api_key) as client:
        job = client.jobs.create(spec)
        Console().print(f"submitted {job.id}")
        _show_job(client.jobs.wait(job.id) if wait else job)


@app.command()
@_exits
def submit(spec: Path, wait: WaitOption = False, url: UrlOption = None, api_key: KeyOption = None) -> None:
    """Submit a job spec (.json/.yaml) to the service."""
    _submit(spec, wait, url, api_key)


@app.command()
@_exits
def status(job_id: str, url: UrlOption = None, api_key: KeyOption = None) -> None:
    """Show a job: status, progress and summary."""
    with _client(url, api_key) as client:
        _show_job(client.jobs.retrieve(job_id))


@app.command()
@_exits
def wait(job_id: str, url: UrlOption = None, api_key: KeyOption = None) -> None:
    """Follow a job to the end; exit 1 if it failed or was cancelled."""
    with _client(url, api_key) as client:
        _show_job(client.jobs.wait(job_id))


@app.command()
@_exits
def metrics(
    job_id: str,
    name: Annotated[Optional[list[str]], typer.Option("--name", "-n", help="series to show (repeat); all if absent")] = None,
    csv: Annotated[bool, typer.Option("--csv", help="print name,step,value rows")] = False,
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """Print a job's metric series."""
    with _client(url, api_key) as client:
        series = client.jobs.metrics(job_id, name)
    if csv:
        print("name,step,value")
        for key, (steps, values) in series.items():
            for step, value in zip(steps.tolist(), values.tolist()):
                print(f"{key},{step},{'' if value != value else repr(value)}")
        return
    table = Table("series", "points", "first step", "last step", "last value")
    for key, (steps, values) in series.items():
        table.add_row(key, str(len(steps)), str(steps[0]) if len(steps) else "", str(steps[-1]) if len(steps) else "",
                      f"{values[-1]:.6g}" if len(values) else "")
    Console().print(table)


@app.command()
@_exits
def artifact(
    job_id: str,
    name: str,
    output: Annotated[Path, typer.Option("--output", "-o", help="file to write")],
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """Download an artifact (kernel .npy, weights .npz, .json) as stored."""
    with _client(url, api_key) as client:
        data = client.jobs.download(job_id, name)
    output.write_bytes(data)
    Console(stderr=True).print(f"wrote {len(data)} bytes to {output}")


@app.command()
@_exits
def cancel(job_id: str, url: UrlOption = None, api_key: KeyOption = None) -> None:
    """Cancel a job; a running one stops at its next step."""
    with _client(url, api_key) as client:
        _show_job(client.jobs.cancel(job_id))


@app.command("list")
@_exits
def list_jobs(
    status: Annotated[Optional[list[str]], typer.Option("--status", help="queued, running, succeeded, failed, cancelled (repeat)")] = None,
    tag: Annotated[Optional[str], typer.Option("--tag")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="show at most this many")] = 20,
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """List jobs, newest first."""
    table = Table("id", "name", "status", "progress", "created")
    with _client(url, api_key) as client:
        for job in itertools.islice(client.jobs.list(status=status, tag=tag, limit=min(limit, 200)), limit):
            table.add_row(job.id, job.name or "", job.status, f"{job.progress.step}/{job.progress.total}",
                          job.created_at.isoformat(timespec="seconds"))
    Console().print(table)


def _show_sweep(sweep) -> None:
    counts = ", ".join(f"{count} {status}" for status, count in sweep.counts.items())
    Console().print(f"sweep {sweep.id} {sweep.status}: {counts}", highlight=False)
    for fit in sweep.fits:
        Console().print(f"  {fit['verdict']}", highlight=False)


def _follow_sweep(client, sweep, wait: bool) -> None:
    Console().print(f"submitted sweep {sweep.id}")
    if wait:
        sweep = client.sweeps.wait(sweep.id)
    _show_sweep(sweep)
    if wait and sweep.status != "succeeded":
        raise typer.Exit(EXIT_FAILED)


@app.command()
@_exits
def sweep(spec: Path, wait: WaitOption = False, url: UrlOption = None, api_key: KeyOption = None) -> None:
    """Submit a sweep spec {name, base, grid, fits} (.json/.yaml)."""
    with _client(url, api_key) as client:
        _follow_sweep(client, client.sweeps.create(spec), wait)


@app.command()
@_exits
def preset(
    name: str,
    scale: Annotated[str, typer.Option("--scale", help="smoke | cpu | paper")] = "smoke",
    wait: WaitOption = False,
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """Run one of the paper's experiments (fig1-width, fig2-bottleneck, table1-hessian, …) as a sweep."""
    with _client(url, api_key) as client:
        _follow_sweep(client, client.presets.run(name, scale=scale), wait)


@app.command()
def up(
    host: str = typer.Option("127.0.0.1", help="Interface the API listens on."),
    port: int = typer.Option(8000, help="Port of the API."),
    workers: int = typer.Option(1, min=1, max=64, help="Celery worker processes (one job each)."),
    api_processes: int = typer.Option(1, min=1, max=64, help="uvicorn processes serving the API (reads scale with them)."),
) -> None:
    """Migrate the database and serve the API and worker(s) in the foreground; Ctrl-C stops them.

    With no NTKLAB_* settings this is the embedded default: SQLite in var/ and a filesystem
    broker, no servers needed. NTKLAB_DATABASE_URL / NTKLAB_BROKER_URL select the full stack."""
    needs("server", "worker", purpose="ntklab up")
    from ntklab.serve import serve

    raise typer.Exit(serve(host, port, workers, api_processes))


@app.command()
def migrate(revision: str = typer.Argument("head", help="Alembic revision to upgrade to.")) -> None:
    """Upgrade the database of the settings (NTKLAB_DATABASE_URL) with the migrations shipped in the package."""
    needs("server", purpose="ntklab migrate")
    from config.settings import Settings
    from store.migrate import upgrade

    upgrade(Settings().database_url, revision)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(context: typer.Context) -> None:
    """Run one worker node on NTKLAB_QUEUE (one job at a time); other options go to `celery worker` (e.g. -n gpu0@%h)."""
    needs("server", "worker", purpose="ntklab worker")
    from workers.main import main as worker_main

    worker_main(context.args)


if __name__ == "__main__":
    app()

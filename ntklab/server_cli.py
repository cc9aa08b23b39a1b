"""The server launcher's commands: up, migrate, worker, keys, and `run` (which runs a job in this process with
--local, and submits it to a service without).

Each imports its server parts (FastAPI, SQLAlchemy, Celery, the engine) only when run, after `needs`
has said which extra to install when one is missing, so `ntklab --help` and the client's commands
work on `pip install ntklab`. ntklab/cli.py composes these with the client's commands (ntklab/client_cli.py).
"""

from __future__ import annotations

from pathlib import Path

import typer
import yaml
from pydantic import ValidationError

from ntklab.admin import keys_app
from ntklab.api_schemas import problems as problem_types
from ntklab.api_schemas.field_errors import field_errors
from ntklab.api_schemas.spec import JobSpec
from ntklab.cli_output import EXIT_FAILED, EXIT_USAGE, JsonOption, emit, fail, field_lines, note, timings_text
from ntklab.client_cli import submit
from ntklab.extras import needs
from ntklab.specs import load_document

app = typer.Typer()
app.add_typer(keys_app)


@app.command("run")
def run_command(
    spec_path: Path = typer.Argument(..., exists=True, dir_okay=False, help="Job spec (.json, .yaml or .yml)."),
    local: bool = typer.Option(False, "--local", help="Run the engine in this process, without the service."),
    out: Path = typer.Option(
        Path("ntklab-out"), "--out", help="Directory for summary.json, metrics.json and artifacts."
    ),
    as_json: JsonOption = False,
) -> None:
    """Run one job. Exit 0 on success, 2 on a bad spec, 1 if the run fails."""
    if not local:
        submit(spec_path, wait=True, url=None, api_key=None, as_json=as_json)
        return
    spec = _local_spec(spec_path, as_json)
    needs("worker", purpose="ntklab run --local")
    from ntklab.local import run_local

    try:
        result = run_local(spec, out, progress=not as_json)
    except Exception as exc:  # noqa: BLE001 - any engine failure is exit 1 with its message
        fail(f"run failed: {type(exc).__name__}: {exc}", EXIT_FAILED, as_json)
    s = result.summary
    if as_json:
        emit({"out": str(out), "summary": s, "warnings": [w.model_dump(mode="json") for w in result.warnings]})
        return
    note(f"{s['outcome']} after {s['steps']} steps: loss {s['final_loss']}, delta_k_max {s['delta_k_max']} → {out}")
    for warning in result.warnings:
        note(f"warning {warning.code}: {warning.message}")
    if isinstance(s.get("timings"), dict):
        note(f"{s['wall_time_s']:.2f} s: {timings_text(s['timings'])}")


def _local_spec(spec_path: Path, as_json: bool) -> JobSpec:
    """The spec file (JSON or YAML, as `submit` reads it) validated here; a bad one exits 2 naming each field once."""
    try:
        document = load_document(spec_path)
    except (ValueError, yaml.YAMLError) as exc:
        fail(f"{spec_path}: not a spec file: {exc}", EXIT_USAGE, as_json)
    try:
        return JobSpec.model_validate(document)
    except ValidationError as exc:
        located = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        problems = [error.model_dump(exclude_none=True) for error in field_errors(located, document)]
        message = "\n".join([f"{spec_path}: the spec failed validation", *field_lines(problems)])
        fail(message, EXIT_USAGE, as_json, {"type": problem_types.VALIDATION, "errors": problems})


@app.command()
def up(
    host: str = typer.Option("127.0.0.1", help="Interface the API listens on."),
    port: int = typer.Option(8000, help="Port of the API."),
    workers: int = typer.Option(1, min=1, max=64, help="Celery worker processes (one job each)."),
    api_processes: int = typer.Option(
        1, min=1, max=64, help="uvicorn processes serving the API (reads scale with them)."
    ),
    as_json: JsonOption = False,
) -> None:
    """Migrate the database and serve the API and worker(s) in the foreground; Ctrl-C stops them.

    With no NTKLAB_* settings this is the embedded default: SQLite in var/ and a filesystem
    broker, no servers needed. NTKLAB_DATABASE_URL / NTKLAB_BROKER_URL select the full stack.
    With --json, stdout holds one line, {"url", "docs"}, and the servers' logs go to stderr."""
    needs("server", "worker", purpose="ntklab up")
    from ntklab.serve import serve

    raise typer.Exit(serve(host, port, workers, api_processes, as_json=as_json))


@app.command()
def migrate(
    revision: str = typer.Argument("head", help="Alembic revision to upgrade to."), as_json: JsonOption = False
) -> None:
    """Upgrade the database of the settings (NTKLAB_DATABASE_URL) with the migrations shipped in the package."""
    needs("server", purpose="ntklab migrate")
    from ntklab.config.settings import Settings
    from ntklab.store.migrate import upgrade

    upgrade(Settings().database_url, revision)
    if as_json:
        emit({"revision": revision, "upgraded": True})


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(context: typer.Context) -> None:
    """Run one worker node on NTKLAB_QUEUE (one job at a time); other options go to `celery worker` (e.g. -n gpu0@%h)."""
    needs("server", "worker", purpose="ntklab worker")
    from ntklab.workers.main import main as worker_main

    worker_main(context.args)

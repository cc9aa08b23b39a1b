"""Which optional install a part of ntklab needs, said plainly instead of with a traceback.

`pip install ntklab` is the client (SDK, wire contract, client commands). The extras add
what the rest needs:

    [plots]   matplotlib, scipy               job and sweep figures in the SDK
    [server]  FastAPI, SQLAlchemy, Celery, …   the API, `ntklab up / migrate / keys`
    [worker]  torch, scipy, scikit-learn      the engine: `ntklab worker`, `ntklab run --local`
"""

from __future__ import annotations

import importlib.util

import typer
from rich.console import Console
from rich.markup import escape

EXTRAS: dict[str, tuple[str, ...]] = {
    "plots": ("matplotlib", "scipy"),
    "server": (
        "pydantic_settings",
        "fastapi",
        "uvicorn",
        "sqlalchemy",
        "alembic",
        "celery",
        "redis",
        "limits",
        "psycopg",
        "prometheus_client",
        "cachetools",
        "matplotlib",
        "scipy",
    ),
    "worker": ("torch", "scipy", "sklearn"),
}


class MissingExtraError(ImportError):
    """A part of ntklab was used whose optional dependencies are not installed; the message says what to install."""


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here."""
    return [module for module in EXTRAS[extra] if importlib.util.find_spec(module) is None]


def require(*extras: str, purpose: str) -> None:
    """Raise MissingExtraError naming the pip command when any module of `extras` is missing."""
    missing = sorted({module for extra in extras for module in missing_modules(extra)})
    if missing:
        raise MissingExtraError(
            f"{purpose} needs the {' and '.join(extras)} extra{'s' if len(extras) > 1 else ''} "
            f"(missing: {', '.join(missing)}): pip install 'ntklab[{','.join(extras)}]'"
        )


def needs(*extras: str, purpose: str) -> None:
    """For a command: exit 2 with the pip command to run when an extra that `purpose` needs is missing."""
    try:
        require(*extras, purpose=purpose)
    except MissingExtraError as missing:
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(missing))}", highlight=False)
        raise typer.Exit(2) from None

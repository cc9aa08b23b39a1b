"""`ntklab keys create|list|revoke`: API keys, written straight to the database of the settings.

Run it where the API's settings are (NTKLAB_DATABASE_URL, or an .env file); it needs no
running API. `create` prints the secret once; only its SHA-256 is stored. With `--json` each
command prints one JSON document on stdout and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ntklab.extras import needs
from ntklab.terminal import stderr_console, stdout_console

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

JsonOption = Annotated[bool, typer.Option("--json", help="print one JSON document on stdout and nothing else")]
keys_app = typer.Typer(
    name="keys", help="Create, list and revoke API keys (admin; writes the database directly).", no_args_is_help=True
)


@keys_app.callback()
def _server_installed() -> None:
    needs("server", purpose="ntklab keys")


@contextmanager
def _session() -> Iterator[Session]:
    from ntklab.config.settings import Settings
    from ntklab.store.db import make_engine, make_session_factory

    engine = make_engine(Settings().database_url)
    try:
        with make_session_factory(engine)() as session:
            yield session
    finally:
        engine.dispose()


@keys_app.command("create")
def create(
    name: str = typer.Argument(..., help="who or what the key is for"),
    admin: bool = typer.Option(False, "--admin", help="the key sees every owner's jobs and sweeps"),
    as_json: JsonOption = False,
) -> None:
    """Make a key and print its secret (shown this once only)."""
    from ntklab.store import api_keys

    with _session() as session:
        made = api_keys.create_key(session, name, is_admin=admin)
    if as_json:
        typer.echo(json.dumps({**_key_document(made.key), "secret": made.secret}))
        return
    console = stdout_console()
    console.print(f"created {made.key.id} ({'admin' if admin else 'user'} key {name!r})")
    console.print("secret (store it now; it is not shown again):", style="bold")
    typer.echo(made.secret)


@keys_app.command("list")
def list_keys(as_json: JsonOption = False) -> None:
    """Every key: name, display prefix, admin, created, revoked, id."""
    from ntklab.store import api_keys

    with _session() as session:
        keys = api_keys.list_keys(session)
    if as_json:
        typer.echo(json.dumps([_key_document(key) for key in keys]))
        return
    table = Table("name", "prefix", "admin", "created", "revoked")
    table.add_column("id", no_wrap=True)
    for key in keys:
        table.add_row(
            key.name,
            f"{key.prefix}…",
            "yes" if key.is_admin else "",
            f"{key.created_at:%Y-%m-%d %H:%M}",
            f"{key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "",
            key.id,
        )
    stdout_console().print(table)


@keys_app.command("revoke")
def revoke(
    key_id: str = typer.Argument(..., help="the key's id (key_…), as `ntklab keys list` shows it"),
    as_json: JsonOption = False,
) -> None:
    """Revoke a key: a 401 from each API process once it stops remembering the key (NTKLAB_AUTH_CACHE_S,
    default 5 s). Its jobs and sweeps stay (the admin key still sees them)."""
    from ntklab.store import api_keys

    with _session() as session:
        revoked = api_keys.revoke(session, key_id)
    if as_json:
        typer.echo(json.dumps({"id": key_id, "revoked": revoked}))
    elif revoked:
        stdout_console().print(f"revoked {key_id}; API processes refuse it within NTKLAB_AUTH_CACHE_S (default 5 s)")
    else:
        stderr_console().print(f"no unrevoked key {key_id!r}", style="red", highlight=False)
    if not revoked:
        raise typer.Exit(1)


def _key_document(key) -> dict:
    """A key as --json shows it (never its secret hash)."""
    return {
        "id": key.id,
        "name": key.name,
        "prefix": key.prefix,
        "admin": key.is_admin,
        "created_at": key.created_at.isoformat(),
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }

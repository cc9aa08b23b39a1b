"""`ntklab keys create|list|revoke`: API keys, written straight to the database of the settings.

Run it where the API's settings are (NTKLAB_DATABASE_URL, or an .env file); it needs no
running API. `create` prints the secret once; only its SHA-256 is stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from ntklab.extras import needs

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

keys_app = typer.Typer(name="keys", help="Create, list and revoke API keys (admin; writes the database directly).", no_args_is_help=True)
console = Console()


@keys_app.callback()
def _server_installed() -> None:
    needs("server", purpose="ntklab keys")


@contextmanager
def _session() -> Iterator[Session]:
    from config.settings import Settings
    from store.db import make_engine, make_session_factory

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
) -> None:
    """Make a key and print its secret (shown this once only)."""
    from store import api_keys

    with _session() as session:
        made = api_keys.create_key(session, name, is_admin=admin)
    console.print(f"created {made.key.id} ({'admin' if admin else 'user'} key {name!r})")
    console.print("secret (store it now; it is not shown again):", style="bold")
    typer.echo(made.secret)


@keys_app.command("list")
def list_keys() -> None:
    """Every key: name, display prefix, admin, created, revoked, id."""
    from store import api_keys

    with _session() as session:
        keys = api_keys.list_keys(session)
    table = Table("name", "prefix", "admin", "created", "revoked")
    table.add_column("id", no_wrap=True)
    for key in keys:
        table.add_row(
            key.name, f"{key.prefix}…", "yes" if key.is_admin else "",
            f"{key.created_at:%Y-%m-%d %H:%M}", f"{key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "", key.id,
        )
    console.print(table)


@keys_app.command("revoke")
def revoke(key_id: str = typer.Argument(..., help="the key's id (key_…), as `ntklab keys list` shows it")) -> None:
    """Revoke a key: a 401 from each API process once it stops remembering the key (NTKLAB_AUTH_CACHE_S,
    default 5 s). Its jobs and sweeps stay (the admin key still sees them)."""
    from store import api_keys

    with _session() as session:
        revoked = api_keys.revoke(session, key_id)
    if not revoked:
        console.print(f"no unrevoked key {key_id!r}", style="red")
        raise typer.Exit(1)
    console.print(f"revoked {key_id}; API processes refuse it within NTKLAB_AUTH_CACHE_S (default 5 s)")

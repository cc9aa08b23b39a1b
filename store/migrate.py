"""Migrate a database with the Alembic environment shipped inside the package.

`migrations/` (env.py, versions/, alembic.ini) is package data, found with
importlib.resources, so a server installed from a wheel upgrades its database from any
folder: `ntklab migrate` does what compose's one-shot `migrate` service does.
"""

from __future__ import annotations

from importlib.resources import files

from alembic import command
from alembic.config import Config


def alembic_config(database_url: str, *, configure_logging: bool = True) -> Config:
    """The packaged alembic.ini, pointed at `database_url`; `configure_logging=False` keeps the caller's logging."""
    folder = files("ntklab.migrations")
    config = Config(str(folder / "alembic.ini"))
    config.set_main_option("script_location", str(folder))
    config.attributes["url"] = database_url
    config.attributes["keep_logging"] = not configure_logging
    return config


def upgrade(database_url: str, revision: str = "head", *, configure_logging: bool = True) -> None:
    """`alembic upgrade <revision>` on `database_url`."""
    command.upgrade(alembic_config(database_url, configure_logging=configure_logging), revision)


def downgrade(database_url: str, revision: str, *, configure_logging: bool = True) -> None:
    """`alembic downgrade <revision>` on `database_url`."""
    command.downgrade(alembic_config(database_url, configure_logging=configure_logging), revision)

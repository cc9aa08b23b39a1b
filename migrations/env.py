"""Alembic environment: the URL comes from `-x url=`, then `config.attributes["url"]`, then the settings.

SQLite cannot ALTER most things in place, so migrations run in batch mode there.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from ntklab.config.settings import Settings
from ntklab.store.db import is_sqlite, make_engine
from ntklab.store.models import Base

config = context.config
if config.config_file_name is not None and not config.attributes.get("keep_logging"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    return (
        context.get_x_argument(as_dictionary=True).get("url") or config.attributes.get("url") or Settings().database_url
    )


def run_offline() -> None:
    url = database_url()
    context.configure(
        url=url,
        target_metadata=Base.metadata,
        literal_binds=True,
        render_as_batch=is_sqlite(url),
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    url = database_url()
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=Base.metadata,
                render_as_batch=is_sqlite(url),
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()

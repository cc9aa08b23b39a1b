"""What the API does about auth when it starts: warn loudly if auth is off on what looks like a
shared server, and make the bootstrap admin key (`bootstrap_admin_key`) if it is missing."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from sqlalchemy.orm import Session, sessionmaker

from ntklab.config.settings import Settings
from ntklab.store import api_keys
from ntklab.store.db import is_sqlite

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "testserver")


def looks_shared(settings: Settings) -> bool:
    """PostgreSQL, a Redis broker or a public URL off this machine: not the embedded, single-user default."""
    off_machine = bool(settings.public_url) and (urlsplit(settings.public_url).hostname or "") not in LOOPBACK_HOSTS
    return not is_sqlite(settings.database_url) or settings.broker_url.startswith("redis") or off_machine


def warn_if_open(settings: Settings) -> None:
    if settings.auth == "off" and looks_shared(settings):
        log.warning(
            "!!! NTKLAB_AUTH=off on what looks like a shared server (database %s, broker %s, public URL %s): "
            "every request is the anonymous owner and sees every anonymous job. Set NTKLAB_AUTH=on. !!!",
            settings.database_url.split("://")[0],
            settings.broker_url.split("://")[0],
            settings.public_url,
        )


def ensure_bootstrap_admin(settings: Settings, sessions: sessionmaker[Session]) -> None:
    secret = settings.bootstrap_admin_key.get_secret_value() if settings.bootstrap_admin_key else ""
    if not secret:
        return
    with sessions() as session:
        key = api_keys.ensure_admin(session, secret)
    if key.revoked_at is not None or not key.is_admin:
        log.warning(
            "the bootstrap admin key %s (%s…) is revoked or not an admin key; left as it is", key.id, key.prefix
        )
    else:
        log.info("bootstrap admin key %s (%s…) is present", key.id, key.prefix)

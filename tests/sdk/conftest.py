"""The real service app on a migrated SQLite file of the test's own (filesystem broker, no worker), and the SDK on it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ntklab.client import Client
from ntklab.config.settings import Settings
from ntklab.service.app import create_app


@pytest.fixture
def app(tmp_path: Path, sqlite_template: Path) -> FastAPI:
    """The app on a copy of the session's migrated SQLite file (tests/conftest.py)."""
    path = tmp_path / "ntklab.db"
    shutil.copy(sqlite_template, path)
    url = f"sqlite:///{path}"
    return create_app(
        Settings(
            database_url=url,
            broker_url="filesystem://",
            broker_dir=tmp_path / "broker",
            public_url="http://testserver",
            reaper_enabled=False,
        )
    )


@pytest.fixture
def client(app: FastAPI) -> Iterator[Client]:
    """A synchronous SDK client on `app`, without retries."""
    with TestClient(app) as http:
        yield Client(base_url="http://testserver", http_client=http, max_retries=0)

"""`ntklab keys create|list|revoke` against a real database (the settings' NTKLAB_DATABASE_URL)."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import create_engine, select
from typer.testing import CliRunner

from ntklab.admin import keys_app
from ntklab.store import api_keys
from ntklab.store.models import ApiKey

KEY_ID = re.compile(r"key_[0-9a-f]{32}")


@pytest.fixture
def keys(database_url: str, monkeypatch: pytest.MonkeyPatch):
    """keys(*args) → the CliRunner result of `ntklab keys *args` on this test's database."""
    monkeypatch.setenv("NTKLAB_DATABASE_URL", database_url)
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(keys_app, list(args), env={"COLUMNS": "200"})

    return run


def rows(database_url: str) -> list[dict]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return [row._asdict() for row in connection.execute(select(ApiKey.__table__))]
    finally:
        engine.dispose()


def test_create_prints_the_secret_once_and_stores_only_its_hash(keys, database_url):
    made = keys("create", "alice")
    assert made.exit_code == 0, made.output
    secret = made.output.strip().splitlines()[-1]
    [key_id] = KEY_ID.findall(made.output)
    [row] = rows(database_url)
    assert secret.startswith("ntk_") and row["id"] == key_id and row["name"] == "alice" and row["is_admin"] is False
    assert row["secret_hash"] == api_keys.digest(secret)
    assert not any(secret in str(value) for value in row.values())
    assert secret not in keys("list").output


def test_list_shows_every_key_and_revoke_marks_it(keys, database_url):
    alice = KEY_ID.findall(keys("create", "alice").output)[0]
    root = KEY_ID.findall(keys("create", "root", "--admin").output)[0]
    listed = keys("list")
    assert listed.exit_code == 0 and {alice, root} <= set(KEY_ID.findall(listed.output))
    assert "yes" in next(line for line in listed.output.splitlines() if root in line)

    assert keys("revoke", alice).exit_code == 0
    assert {row["id"]: row["revoked_at"] is not None for row in rows(database_url)} == {alice: True, root: False}
    again = keys("revoke", alice)
    assert again.exit_code == 1 and "no unrevoked key" in again.output
    assert keys("revoke", "key_nope").exit_code == 1

"""The `ntklab` command is two parts in one app: the client's commands (ntklab/client_cli.py) and the server
launcher's (ntklab/server_cli.py); the import-linter contract that keeps the client free of server code covers
every module of ntklab but the launcher's."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import typer

import ntklab
from ntklab import cli, client_cli, server_cli

REPO = Path(__file__).resolve().parents[2]
CLIENT_COMMANDS = {
    "submit",
    "estimate",
    "status",
    "wait",
    "metrics",
    "artifact",
    "cancel",
    "list",
    "sweep",
    "preset",
    "presets",
    "sweeps",
}
SERVER_COMMANDS = {"run", "up", "migrate", "worker", "keys"}
CLIENT_CONTRACT = "The SDK needs no server part"


def _commands(app: typer.Typer) -> dict:
    return dict(typer.main.get_command(app).commands)


def test_one_ntklab_command_has_every_command_of_both_parts():
    commands = _commands(cli.app)
    assert set(commands) == CLIENT_COMMANDS | SERVER_COMMANDS
    assert set(_commands(client_cli.app)) == CLIENT_COMMANDS and set(_commands(server_cli.app)) == SERVER_COMMANDS
    sweeps, keys = commands["sweeps"], commands["keys"]
    assert set(sweeps.commands) == {"list", "show", "table", "plot"} and set(keys.commands) == {
        "create",
        "list",
        "revoke",
    }
    assert {option for param in commands["run"].params for option in getattr(param, "opts", [])} >= {"--local", "--out"}


def _contract() -> dict:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(contract for contract in contracts if contract["name"].startswith(CLIENT_CONTRACT))


def test_the_client_contract_covers_every_module_but_the_launchers():
    """A new module of ntklab is either checked as client code or named as the launcher's: none slips between."""
    contract = _contract()
    client = set(contract["source_modules"])
    launcher = {module for module in contract["forbidden_modules"] if module.startswith("ntklab.")}
    own = [info for info in pkgutil.iter_modules(ntklab.__path__) if not (REPO / "ntklab" / info.name).is_symlink()]
    modules = {f"ntklab.{info.name}" for info in own}
    assert modules - client - launcher == {"ntklab.cli"}, "ntklab.cli composes both parts; every other module is one"
    assert not client & launcher

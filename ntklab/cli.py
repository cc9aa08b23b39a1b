"""The `ntklab` command line: the client's commands and the server launcher's, in one app.

The client commands (submit, estimate, status, wait, metrics, artifact, cancel, list, sweep, sweeps …,
preset, presets; ntklab/client_cli.py) need only `pip install ntklab`. The server commands
(up, migrate, worker, keys, `run --local`; ntklab/server_cli.py) import their parts when run, and say
which extra to install when it is missing.
How every command writes its output (--json, tables, exit codes): ntklab/client_cli.py, ntklab/cli_output.py.
"""

from __future__ import annotations

import typer

from ntklab import client_cli, server_cli

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Tangent-kernel and Hessian diagnostics.")
app.add_typer(client_cli.app)
app.add_typer(server_cli.app)


@app.callback()
def main() -> None:
    """Tangent-kernel and Hessian diagnostics: is your network in the linear regime, and why?"""


if __name__ == "__main__":
    app()

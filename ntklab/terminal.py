"""Consoles for the command line: a terminal as it is; a pipe or a file without any line wrapping.

rich wraps and cuts table cells to the console's width, 80 columns when stdout is not a
terminal; `ntklab list | grep`, `ntklab status ID > file` must keep every id whole, so there
the console is as wide as any line needs.
"""

from __future__ import annotations

import sys

from rich.console import Console

PIPE_WIDTH = 100_000
"""Console width when the stream is not a terminal: wide enough that no line is ever wrapped."""


def stdout_console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=PIPE_WIDTH)


def stderr_console() -> Console:
    return Console(stderr=True, width=None if sys.stderr.isatty() else PIPE_WIDTH)

"""What every `ntklab` command shares in its output: the --json option, the exit codes, and where a line goes.

With --json, stdout holds exactly one JSON document (`emit`); messages for people go to stderr (`note`),
and a failure is {"error": {...}} on stdout with the message on stderr (`fail`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, NoReturn

import typer
from rich.text import Text

from ntklab.api_schemas.field_errors import named
from ntklab.terminal import stderr_console, stdout_console

JsonOption = Annotated[bool, typer.Option("--json", help="print one JSON document on stdout and nothing else")]
EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3


def note(message: str) -> None:
    """A message for people, on stderr (never in the way of what stdout holds)."""
    stderr_console().print(Text(message), highlight=False)


def say(message: str, as_json: bool) -> None:
    """A line of a command's own output: on stdout, or on stderr when stdout holds the JSON document."""
    (stderr_console() if as_json else stdout_console()).print(Text(message), highlight=False)


def emit(document: Any) -> None:
    """The one JSON document of a --json command."""
    sys.stdout.write(json.dumps(document, ensure_ascii=False, allow_nan=False) + "\n")


def fail(message: str, code: int, as_json: bool, error: dict[str, Any] | None = None) -> NoReturn:
    """Exit with `code`: the message on stderr and, with --json, {"error": …} on stdout."""
    if as_json:
        emit({"error": {"exit_code": code, "message": message, **(error or {})}})
    stderr_console().print(Text.assemble(("error: ", "red"), message), highlight=False)
    raise typer.Exit(code)


def field_lines(problems: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per field, its distinct messages joined: a field is never printed twice."""
    by_field: dict[str, list[str]] = {}
    for error in problems:
        by_field.setdefault(str(error.get("field") or "(spec)"), []).append(str(error.get("message", "")))
    return [f"  {named(field, '; '.join(dict.fromkeys(messages)))}" for field, messages in by_field.items()]


def timings_text(timings: Mapping[str, float]) -> str:
    """summary.timings for people: the phases by time spent, "hessian 3.62 s · training 0.80 s · …"."""
    ranked = sorted(timings.items(), key=lambda item: -item[1])
    return " · ".join(f"{phase} {seconds:.2f} s" for phase, seconds in ranked)

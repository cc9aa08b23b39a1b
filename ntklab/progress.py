"""A rich progress bar for `wait()`: step/total, phase and the server's ETA on stderr.

It draws only when its console is a terminal; in a pipe, a log file or CI it prints
nothing at all.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn


class ProgressBar:
    """`with ProgressBar(label) as bar: bar.update(step, total, phase, eta_s)`."""

    def __init__(self, label: str, *, enabled: bool = True, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[phase]}"),
            TextColumn("{task.fields[eta]}"),
            console=self.console,
            disable=not self.enabled,
            transient=False,
        )
        self._task: TaskID | None = None
        self._label = label

    def __enter__(self) -> ProgressBar:
        self._progress.__enter__()
        self._task = self._progress.add_task(self._label, total=None, phase="", eta="")
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._progress.__exit__(*exc_info)

    def update(self, step: int, total: int | None, phase: str = "", eta_s: float | None = None) -> None:
        assert self._task is not None, "update() outside the with block"
        eta = f"eta {eta_s:.0f}s" if eta_s is not None else ""
        self._progress.update(self._task, completed=step, total=total or None, phase=phase, eta=eta)

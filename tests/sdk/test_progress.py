"""The wait() progress bar draws on a terminal and prints nothing anywhere else."""

from __future__ import annotations

import io

from rich.console import Console

from ntklab.progress import ProgressBar


def _drive(console: Console, enabled: bool = True) -> str:
    with ProgressBar("job_1", enabled=enabled, console=console) as bar:
        bar.update(0, 0, "queued")
        bar.update(3, 10, "train", 12.0)
        bar.update(10, 10, "succeeded", 0.0)
    return console.file.getvalue()


def test_silent_when_not_a_terminal():
    assert _drive(Console(file=io.StringIO())) == ""


def test_draws_step_total_phase_and_eta_on_a_terminal():
    shown = _drive(Console(file=io.StringIO(), force_terminal=True, width=120))
    assert "10/10" in shown and "succeeded" in shown and "eta 0s" in shown


def test_progress_false_silences_a_terminal():
    assert _drive(Console(file=io.StringIO(), force_terminal=True), enabled=False) == ""

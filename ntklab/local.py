"""Run a job in this process (no service) and write its result to a directory.

DIR/summary.json    the named scalars
DIR/warnings.json   [{code, message, values}]: why a number should not be read at face value
DIR/metrics.json    {name: {"step": [...], "value": [...]}}
DIR/<artifact>      kernel_init.npy, weights_final.npz, hessian.json, …
"""

from __future__ import annotations

import json
from pathlib import Path

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.callbacks import Progress
from ntklab.engine.result import Result
from ntklab.engine.run import run
from ntklab.progress import ProgressBar


class BarCallbacks:
    """Engine callbacks that drive a terminal progress bar; never cancels."""

    def __init__(self, bar: ProgressBar) -> None:
        self.bar = bar

    def progress(self, progress: Progress) -> None:
        self.bar.update(progress.step, progress.total, progress.phase, progress.eta_s)

    def metric(self, name: str, step: int, value: float | None) -> None:
        pass

    def cancelled(self) -> bool:
        return False


def run_local(spec: JobSpec, out_dir: Path, *, progress: bool = True) -> Result:
    """Run the engine on `spec` and write summary.json, metrics.json and the artifacts into out_dir."""
    with ProgressBar(spec.name or "run", enabled=progress) as bar:
        result = run(spec, BarCallbacks(bar))
    write_result(result, out_dir)
    return result


def write_result(result: Result, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(result.summary, indent=1, allow_nan=False))
    warnings = [warning.model_dump(mode="json") for warning in result.warnings]
    (out_dir / "warnings.json").write_text(json.dumps(warnings, indent=1, allow_nan=False))
    metrics = {name: {"step": s.steps, "value": s.values} for name, s in result.series.items()}
    (out_dir / "metrics.json").write_text(json.dumps(metrics, allow_nan=False))
    for name, artifact in result.artifacts.items():
        (out_dir / name).write_bytes(artifact.data)

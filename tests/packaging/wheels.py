"""Building ntklab's wheel and installing it into fresh virtual environments, for the packaging tests.

The wheel is built from a copy of the working tree (so a stale build/ folder cannot leak into it);
the environments are made with uv (`uv venv`, `uv pip install`), which installs from its cache in seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "var",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    "ntklab-report",
    "node_modules",
)


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def build_wheel(source: Path, dist: Path) -> Path:
    """`pip wheel` of a copy of the working tree (ntklab/'s links to the server packages kept as links) into `dist`."""
    shutil.copytree(REPO, source, symlinks=True, ignore=NOT_COPIED)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(source),
        ]
    )
    (built,) = dist.glob("ntklab-*.whl")
    return built


def fresh_env(root: Path, *requirements: str) -> Path:
    """A new virtual environment at `root` with `requirements` installed in order; returns its bin/."""
    run([str(BIN / "uv"), "venv", "--quiet", "--python", sys.executable, str(root)])
    for requirement in requirements:
        run([str(BIN / "uv"), "pip", "install", "--quiet", "--python", str(root / "bin" / "python"), requirement])
    return root / "bin"

"""The import-linter contracts (pyproject.toml, run by `make test` as `lint-imports`) hold, and they bite.

Each case copies the packages into a temporary folder, adds one import that crosses a
boundary, and expects `lint-imports` to fail naming the broken contract.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ntklab.localstack import clean_env

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("api_schemas", "analysis", "config", "store", "service", "workers", "ntklab", "migrations")
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, env=clean_env({"PYTHONPATH": str(root)}),
                          capture_output=True, text=True, timeout=300)


def copy_of_the_packages(root: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_contracts_hold_on_this_tree():
    done = lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("workers/tasks.py", "import service.app", "workers is not allowed to import service"),
    ("service/caps.py", "import workers.engine.nets", "The API reaches the workers only through the broker interface"),
    ("service/quota.py", "import torch", "The API process never imports torch"),
    ("workers/engine/ntk.py", "import sqlalchemy", "The engine imports no Celery, SQL"),
    ("store/db.py", "import workers.tasks", "The store imports neither the API nor the workers"),
    ("api_schemas/spec.py", "import numpy", "The wire contract imports only pydantic"),
    ("ntklab/client.py", "import sqlalchemy", "The SDK needs no server part"),
    ("analysis/fits.py", "import store.models", "Analysis is numeric only"),
])
def test_crossing_a_boundary_breaks_a_contract(tmp_path: Path, module: str, line: str, contract: str):
    root = copy_of_the_packages(tmp_path)
    source = root / module
    source.write_text(source.read_text() + f"\n{line}  # crosses a boundary\n")
    done = lint(root)
    assert done.returncode == 1, done.stdout + done.stderr
    broken = done.stdout.split("Broken contracts")[-1]
    assert contract in " ".join(broken.split()), done.stdout

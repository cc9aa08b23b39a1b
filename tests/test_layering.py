"""The import-linter contracts (pyproject.toml, run by `make test` as `lint-imports`) hold, and they bite.

Each case copies the packages into a temporary folder, adds one import that crosses a
boundary, and expects `lint-imports` to fail naming the broken contract.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ntklab.localstack import clean_env

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "api_schemas",
    "planner",
    "analysis",
    "config",
    "store",
    "service",
    "workers",
    "engine",
    "ntklab",
    "migrations",
)
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        cwd=root,
        env=clean_env({"PYTHONPATH": str(root)}),
        capture_output=True,
        text=True,
        timeout=300,
    )


def copy_of_the_packages(root: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(REPO / package, root / package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_contracts_hold_on_this_tree():
    done = lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("workers/tasks.py", "import ntklab.service.app", "ntklab.workers is not allowed to import ntklab.service"),
        (
            "service/caps.py",
            "import ntklab.engine.nets.network",
            "The API reaches the workers only through the broker interface",
        ),
        ("service/quota.py", "import torch", "The API process never imports torch"),
        ("engine/kernels/ntk.py", "import sqlalchemy", "The engine imports no Celery, SQL"),
        ("store/db.py", "import ntklab.workers.tasks", "The store imports neither the API nor the workers"),
        ("api_schemas/spec.py", "import numpy", "The wire contract imports only pydantic"),
        ("api_schemas/spec.py", "import ntklab.planner.estimate", "The wire contract imports only pydantic"),
        ("planner/estimate.py", "import torch", "The planner imports pydantic, the standard library"),
        (
            "planner/architecture.py",
            "import ntklab.api_schemas.problems",
            "The planner imports pydantic, the standard library",
        ),
        (
            "engine/run.py",
            "import ntklab.api_schemas.problems",
            "The engine imports the planner and the wire contract's spec types",
        ),
        ("ntklab/client.py", "import sqlalchemy", "The SDK needs no server part"),
        ("store/db.py", "import ntklab.client", "No server package imports the SDK"),
        ("analysis/fits.py", "import ntklab.store.models", "Analysis is numeric only"),
        ("service/api/routes/presets.py", "import ntklab.service.api.routes.sweeps", "The routers are independent"),
        (
            "service/api/routes/models.py",
            "from ntklab.service.api.routes.datasets import owned",
            "The routers are independent",
        ),
        ("service/caps.py", "import sqlalchemy", "SQL lives in store/"),
    ],
)
def test_crossing_a_boundary_breaks_a_contract(tmp_path: Path, module: str, line: str, contract: str):
    root = copy_of_the_packages(tmp_path)
    source = root / module
    source.write_text(source.read_text() + f"\n{line}  # crosses a boundary\n")
    done = lint(root)
    assert done.returncode == 1, done.stdout + done.stderr
    broken = done.stdout.split("Broken contracts")[-1]
    assert contract in " ".join(broken.split()), done.stdout


SESSION_TYPES = {"sqlalchemy.orm": {"Session", "sessionmaker"}}
"""What the API may take from SQLAlchemy besides the errors of sqlalchemy.exc: the session's type."""


def test_the_api_runs_no_sql_of_its_own():
    """service/ names no SQL construct and runs no statement: its imports of SQLAlchemy (the modules the contract
    "SQL lives in store/" lists) are the session's type and the database's errors; store/ holds every query."""
    found = []
    for path in sorted((REPO / "service").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(alias.name.startswith("sqlalchemy") for alias in node.names):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} imports sqlalchemy whole")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
                names = {alias.name for alias in node.names}
                if node.module != "sqlalchemy.exc" and not names <= SESSION_TYPES.get(node.module, set()):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} imports {sorted(names)} from {node.module}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("execute", "scalar", "scalars")
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} runs a statement (.{node.func.attr})")
    assert found == []

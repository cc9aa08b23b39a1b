"""analysis is torch-free and SQL-free: it imports only the standard library, numpy, scipy, matplotlib and api_schemas."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from ntklab import analysis

ALLOWED = {"numpy", "scipy", "matplotlib", "ntklab.api_schemas", "ntklab.analysis", "__future__"}


def _root(module: str) -> str:
    """`numpy.linalg` → numpy; `ntklab.api_schemas.spec` → ntklab.api_schemas."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "ntklab" else parts[0]


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {_root(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(_root(node.module))
    return roots


def test_every_analysis_module_imports_only_stdlib_numpy_scipy_matplotlib_and_api_schemas():
    modules = sorted(Path(analysis.__file__).parent.glob("*.py"))
    assert len(modules) >= 5
    for path in modules:
        outside = _imported_roots(path) - ALLOWED - set(sys.stdlib_module_names)
        assert not outside, f"{path.name} imports {sorted(outside)}"

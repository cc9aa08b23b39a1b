"""What ntklab installs lives under the one import name `ntklab` (issue 27, item 5).

A researcher keeps their own `analysis.py`, `config.py`, `store.py`, `service.py` and `workers.py`
beside their script; the script's folder comes first on sys.path, so a distribution that installed
top-level packages of those names would have Python find the user's modules instead (`sweep.plot()`
failed with "No module named 'analysis.fit_figure'"). The repository keeps its folders; ntklab/
links to them (ntklab/service -> ../service, ...), so they import as `ntklab.service`, `ntklab.workers`, ...
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

from ntklab.localstack import clean_env
from tests.packaging.wheels import REPO, fresh_env

USER_MODULES = ("analysis", "config", "store", "service", "workers")
SERVER_PACKAGES = sorted(
    p.name for p in (REPO / "ntklab").iterdir() if p.is_symlink() and (p / "__init__.py").is_file()
)

# The user's script: the SDK's client reads a sweep (served by an in-process transport: no server needed)
# and draws it with sweep.plot(), which imports the figure code of ntklab.analysis; then the user's own
# modules are the ones their own imports find.
SCRIPT = textwrap.dedent("""
    import json, sys
    import httpx
    import ntklab

    def fit(group, slope, intercept, points):
        return {"y": "delta_k_max", "x": "model.hidden.0", "group_by": ["model.output_activation"],
                "group": {"model.output_activation": group}, "slope": slope, "slope_low": slope - 0.05,
                "slope_high": slope + 0.05, "intercept": intercept, "r_squared": 0.97,
                "points": [{"x": x, "y_mean": y, "y_std": 0.01, "runs": 2} for x, y in points],
                "verdict": f"{group}: delta_k_max ∝ x^{slope:+.2f}"}

    SWEEP = {"id": "swp_1", "name": "width", "tags": [], "status": "succeeded", "counts": {"succeeded": 2},
             "total": 2, "cancel_requested": False, "created_at": "2025-01-01T12:00:00Z", "spec": {}, "table": [],
             "fits": [fit("identity", -0.5, 0.7, [(16.0, 0.5), (256.0, 0.125)])]}

    def serve(request):
        assert request.url.path == "/v1/sweeps/swp_1", request.url
        return httpx.Response(200, json=SWEEP)

    http = httpx.Client(transport=httpx.MockTransport(serve))
    with ntklab.Client(base_url="http://ntklab.test", api_key="k", http_client=http) as client:
        sweep = client.sweeps.retrieve("swp_1")
    figure = sweep.plot(path="sweep.svg")
    (axes,) = figure.axes

    import analysis, config, store, service, workers
    print(json.dumps({
        "x_label": axes.get_xlabel(),
        "svg": open("sweep.svg", "rb").read(200).lstrip().startswith(b"<"),
        "users": sorted(m.__name__ for m in (analysis, config, store, service, workers) if m.USERS_OWN),
        "ntklab_from": [m.__file__ for m in [sys.modules["ntklab.analysis.fit_figure"]]],
    }))
""")


def users_folder(root: Path) -> Path:
    """A folder as a researcher keeps it: their script beside their own modules of the generic names."""
    root.mkdir()
    for name in USER_MODULES:
        (root / f"{name}.py").write_text(f'"""The researcher\'s own {name} helpers."""\n\nUSERS_OWN = True\n')
    (root / "study.py").write_text(SCRIPT)
    return root


def run_study(python: Path, folder: Path) -> dict:
    done = subprocess.run(
        [str(python), "study.py"], cwd=folder, capture_output=True, text=True, timeout=300, env=clean_env({})
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_study(report: dict, installed_under: Path) -> None:
    assert report["x_label"] == "width m" and report["svg"]
    assert report["users"] == sorted(USER_MODULES)
    (figure_module,) = report["ntklab_from"]
    assert Path(figure_module).resolve().is_relative_to(installed_under.resolve()), figure_module


def test_a_users_own_modules_beside_their_script_break_nothing_in_the_development_install(tmp_path: Path):
    """The editable install (`make install`) that this suite runs in, from a folder outside the repository."""
    check_study(run_study(Path(sys.executable), users_folder(tmp_path / "study")), REPO)


@pytest.mark.slow
def test_a_users_own_modules_beside_their_script_break_nothing_in_an_install_from_the_wheel(
    wheel: Path, tmp_path: Path
):
    bin_ = fresh_env(tmp_path / "venv", f"{wheel}[plots]")
    check_study(run_study(bin_ / "python", users_folder(tmp_path / "study")), tmp_path / "venv")


@pytest.mark.slow
def test_the_wheel_installs_no_top_level_name_but_ntklab(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        (record,) = [name for name in archive.namelist() if name.endswith(".dist-info/RECORD")]
        listed = [line.split(",")[0] for line in archive.read(record).decode().splitlines() if line]
    top = {path.split("/")[0] for path in listed}
    assert top == {"ntklab", record.split("/")[0]}, sorted(top)
    for package in SERVER_PACKAGES:
        assert f"ntklab/{package}/__init__.py" in listed


def test_the_server_packages_are_the_repositorys_folders_linked_into_ntklab():
    assert SERVER_PACKAGES == [
        "analysis",
        "api_schemas",
        "config",
        "engine",
        "migrations",
        "planner",
        "service",
        "store",
        "workers",
    ]
    for package in SERVER_PACKAGES:
        assert (REPO / "ntklab" / package).readlink() == Path("..", package)


def _bare_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [
            f"{path.relative_to(REPO)}:{node.lineno} {name}" for name in names if name.split(".")[0] in SERVER_PACKAGES
        ]
    return found


def test_no_module_imports_a_server_package_by_its_bare_name():
    """The repository's root is on sys.path under pytest, so `import service.app` would still work here,
    as a second copy of the module, and fail in an installed ntklab: every import says ntklab.service."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    found = [hit for name in tracked.stdout.split() for hit in _bare_imports(REPO / name)]
    assert found == []


def test_the_contract_that_keeps_the_sdk_on_top_names_every_sdk_module():
    """The layers' top, the SDK, is the forbidden contract "No server package imports the SDK": a module
    added to ntklab/ must be added to it (as to the SDK contract's own list)."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"].startswith("No server package imports the SDK")]
    sdk = {
        f"ntklab.{p.stem}"
        for p in (REPO / "ntklab").iterdir()
        if not p.is_symlink()
        and not p.name.startswith((".", "__"))
        and (p.suffix == ".py" or (p / "__init__.py").is_file())
    }
    assert set(contract["forbidden_modules"]) == sdk
    assert contract["source_modules"] == [f"ntklab.{p}" for p in SERVER_PACKAGES]

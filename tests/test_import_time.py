"""No work at import time: importing every module builds no app, broker, engine or settings and creates no file.

Each entry point (the API's app factory, `ntklab.workers.main`, `ntklab up`, Alembic's env.py)
builds one `Settings` and what hangs off it; a plain import must not. The check runs in a
fresh interpreter whose working folder is empty, so a folder made by an import shows up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ntklab.localstack import clean_env

PACKAGES = ("ntklab",)
SKIPPED = ("__main__", "env")  # `python -m ntklab.workers` runs a worker, migrations/env.py a migration

PROBE = f"""
import gc, importlib, json, pkgutil

imported = []
for root in {PACKAGES!r}:
    package = importlib.import_module(root)
    imported.append(root)
    for module in pkgutil.walk_packages(package.__path__, prefix=root + "."):
        if module.name.rsplit(".", 1)[-1] not in {SKIPPED!r}:
            importlib.import_module(module.name)
            imported.append(module.name)

from celery import Celery
from fastapi import FastAPI
from sqlalchemy.engine import Engine
from ntklab.config.settings import Settings

built = sorted({{type(o).__name__ for o in gc.get_objects() if issubclass(type(o), (Celery, FastAPI, Engine, Settings))}})
print(json.dumps({{"imported": imported, "built": built}}))
"""


def test_importing_every_module_builds_nothing_and_creates_no_file(tmp_path: Path):
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tmp_path,
        env=clean_env({"PYTHONPATH": str(repo)}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert {
        "ntklab.service.app",
        "ntklab.workers.tasks",
        "ntklab.workers.queue",
        "ntklab.workers.celery_app",
        "ntklab.store.job_store",
        "ntklab.engine.run",
        "ntklab.cli",
    } <= set(report["imported"])
    assert report["built"] == [], f"built at import time: {report['built']}"
    assert list(tmp_path.iterdir()) == [], "an import created files in the working folder"

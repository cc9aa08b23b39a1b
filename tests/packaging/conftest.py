from __future__ import annotations

from pathlib import Path

import pytest

from tests.packaging.wheels import build_wheel


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ntklab's wheel, built once for every packaging test of the run."""
    return build_wheel(tmp_path_factory.mktemp("source") / "ntklab", tmp_path_factory.mktemp("dist"))

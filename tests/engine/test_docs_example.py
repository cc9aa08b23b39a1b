"""docs/diagnostics.md's example of the engine as a library runs as written, on a plain nn.Sequential."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "diagnostics.md"


def example_code() -> str:
    text = DOC.read_text()
    match = re.search(r"<!-- engine-example -->\s*```python\n(.*?)```\s*<!-- /engine-example -->", text, re.S)
    assert match, "docs/diagnostics.md lost its engine example block"
    return match.group(1)


def test_the_engine_example_in_the_docs_runs_and_finds_the_wide_linear_net_nearly_linear(capsys):
    namespace: dict = {}
    exec(compile(example_code(), str(DOC), "exec"), namespace)  # noqa: S102 - our own documentation
    printed = capsys.readouterr().out
    assert "ΔK" in printed and "linearization error" in printed
    assert namespace["loss"].item() < 0.01, "the example's training converges"
    assert 0 < namespace["delta_k"] < 0.1 and len(namespace["sensitivity"]) == 1

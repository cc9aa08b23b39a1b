"""Every shipped example ends without warnings (issue 26, item 5): examples/*.json and examples/graphs/*.json,
run as written through ntklab.engine.run (what `ntklab run EXAMPLE --local` runs), finish with an empty
`warnings` list — no target_loss_not_reached, no hessian_not_converged — unless the example exists to show a
warning, says so in its name, and is listed in SHOWS_A_WARNING with that code.

The two wide examples take minutes on a CPU (docs/benchmarks.md, "Widths 10⁵ and 10⁶ on the CPU": 3 min 25 s
and 4 min 8 s), too long for the suite: they are listed in TOO_SLOW with the run that checked them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.run import run

pytestmark = pytest.mark.slow

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.json")) + sorted((EXAMPLES_DIR / "graphs").glob("*.json"))
SHOWS_A_WARNING: dict[str, list[str]] = {}
"""Example (path under examples/) → the warning codes it exists to show; none does today."""
TOO_SLOW: dict[str, str] = {
    "wide-1e5.json": "3 min 17 s on a CPU; run whole by hand at this commit: converged at step 962, no warnings (its top-3 "
    "Hessian needs more than the 32 steps it had, which ended hessian_not_converged, 0.0067 relative)",
    "wide-1e6.json": "minutes and 5 GB on a CPU; its Hessian at w₀ checked by hand at this commit: both runs certified 10⁻³ "
    "in 27 and 22 products (the 24 it had would have left one uncertified)",
}


def name(path: Path) -> str:
    return str(path.relative_to(EXAMPLES_DIR))


@pytest.mark.parametrize("path", EXAMPLES, ids=[name(path) for path in EXAMPLES])
def test_example_ends_without_warnings(path):
    if name(path) in TOO_SLOW:
        pytest.skip(TOO_SLOW[name(path)])
    spec = JobSpec.model_validate(json.loads(path.read_text()))
    result = run(spec)
    codes = [warning.code for warning in result.warnings]
    assert codes == SHOWS_A_WARNING.get(name(path), []), [warning.message for warning in result.warnings]
    assert result.summary["converged"] or spec.training.target_loss is None

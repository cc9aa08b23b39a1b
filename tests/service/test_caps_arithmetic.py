"""The API process never imports torch: the parameter count, the memory and work estimate and every
cap are arithmetic on the spec.

A fresh interpreter imports the app and the caps, checks a few specs (mlp, cnn, conv resnet,
and two that break a cap), estimates them, and reports what it found and whether torch got imported. The
counts are checked against p = Σ_l out_l·fan_in_l + out_l·[bias] written out by hand here;
tests/engine/test_nets.py checks the same arithmetic against the built torch networks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SPECS = {
    # d = 4 → 8 → O = 2: (4·8 + 8) + (8·2 + 2)
    "mlp": ({"model": {"hidden": [8]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}}, 58),
    # digits 1×8×8, k = 3, 'same' padding: (1·9·4 + 4) + (4·9·6 + 6) + (6·8·8·10 + 10)
    "cnn": (
        {
            "model": {"kind": "cnn", "hidden": [4, 6], "readout": "flatten"},
            "data": {"kind": "builtin", "name": "digits"},
        },
        40 + 222 + 3850,
    ),
    # first conv (1·9·4 + 4), two blocks 2·(4·9·4 + 4), global-average readout (4·10 + 10)
    "resnet_conv": (
        {
            "model": {"kind": "resnet", "block": "conv", "hidden": [4], "blocks": 2},
            "data": {"kind": "builtin", "name": "digits"},
        },
        40 + 296 + 50,
    ),
}
REFUSED = {
    "too_wide": {"model": {"hidden": [100_000]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}},
    "kernel_too_large": {
        "model": {"kind": "cnn", "hidden": [3], "kernel_size": 9, "padding": 0},
        "data": {"kind": "builtin", "name": "digits"},
    },
}

PROGRAM = """
import json, sys
from ntklab.api_schemas.spec import JobSpec
from ntklab.config.settings import Settings
import ntklab.service.app
import ntklab.service.caps
from ntklab.planner.estimate import estimate_job
from ntklab.service.problems import ProblemError

specs, refused = json.loads(sys.argv[1]), json.loads(sys.argv[2])
settings = Settings(max_width=10_000)
counts, fields, data = {}, {}, {}
for name, body in specs.items():
    counts[name] = ntklab.service.caps.check_spec_caps(JobSpec.model_validate(body), settings)
    data[name] = next(t.value for t in estimate_job(JobSpec.model_validate(body)).memory if t.name == "data")
for name, body in refused.items():
    try:
        ntklab.service.caps.check_spec_caps(JobSpec.model_validate(body), settings)
    except ProblemError as error:
        fields[name] = [e.field for e in error.problem.errors]
torch = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print(json.dumps({"counts": counts, "fields": fields, "data": data, "torch": torch}))
"""


def test_caps_count_parameters_without_importing_torch():
    bodies = json.dumps({name: body for name, (body, _) in SPECS.items()})
    answer = subprocess.run(
        [sys.executable, "-c", PROGRAM, bodies, json.dumps(REFUSED)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout.strip().splitlines()[-1])
    assert report["torch"] == [], "the API path imported torch"
    assert report["counts"] == {name: count for name, (_, count) in SPECS.items()}
    assert report["fields"] == {"too_wide": ["model.hidden.0"], "kernel_too_large": ["model.kernel_size"]}
    # 2·8·n·(d + O): 8 points of 4 features and 2 targets; 256 digits of 64 pixels and 10 targets
    assert report["data"] == {"mlp": 16 * 8 * 6, "cnn": 16 * 256 * 74, "resnet_conv": 16 * 256 * 74}

"""Examples that run as written (issue 26, item 5): every fenced code block of README.md and docs/*.md that
submits work runs against a live service, or is listed in SKIPPED with the reason.

A block submits work when, comments left out, it POSTs with curl (`-X POST`, `-d`, `--data-binary`, `-F`),
runs a submitting command of the `ntklab` client (submit, run, sweep, preset, estimate), or calls
`client.<resource>.create / upload / run / estimate` in Python. Each runs as a test of its own, named by
file:line, on a live API and one Celery worker on PostgreSQL and Redis (tests/conftest.py
`postgres_redis_stack`; on the embedded filesystem broker the worker died once with a JSONDecodeError reading a
message file as it was written, a race of that transport left for its own issue), in a folder of its own that holds `examples/` (the repository's, linked) so that the
relative paths of the docs resolve:

- Python: the block in a fresh interpreter with NTKLAB_URL set and the service's address for
  http://127.0.0.1:8000; a block that continues an earlier one is preceded by the names it uses (PRELUDES,
  keyed like SKIPPED); it must exit 0.
- bash (and shell lines): `set -euo pipefail`, the service's address for http://127.0.0.1:8000 and $API,
  every curl with --fail-with-body (an error status fails the block), and the ids a block's reader would
  paste in for `job_…` / `swp_…` (`placeholder_ids`: a finished job, or a queued one for the block that
  cancels and deletes it, and a two-job sweep, made for the block); it must exit 0.

After each block, whatever it queued and did not wait for is cancelled, so that the next block's waits
are for its own jobs. `test_every_submitting_block_is_run_or_skipped_with_a_reason` fails when a block
submits work and is in neither list, and when SKIPPED or PRELUDES name a block that no longer exists.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import served

pytestmark = [pytest.mark.slow, pytest.mark.stack]

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)\s*$")
CURL_SUBMITS = re.compile(r"\bcurl\b.*(-X POST|\s-d\s|--data-binary|\s-F\s)")
CLI_SUBMITS = re.compile(r"(^|[\s($|])ntklab (submit|run|sweep|preset|estimate)\b")
SDK_SUBMITS = re.compile(r"\bclient\.\w+\.(create|upload|run|estimate)\(")
BLOCK_TIMEOUT_S = 600

SKIPPED: dict[tuple[str, str], str] = {
    (
        "docs/sdk.md",
        "client = ntklab.Client()  # NTKLAB_URL (default http://127.0.0.1:8000), NTKLAB_API_KEY",
    ): "the README's snippet, character for character (tests/sdk/test_live.py "
    "test_readme_and_docs_carry_the_same_snippet); run as README.md's",
    (
        "docs/sdk.md",
        "ntklab submit SPEC [--wait]         submit a .json/.yaml spec; --wait follows it and prints the summary",
    ): "the command line's synopsis: SPEC, ID and NAME are placeholders, not commands (tests/sdk/test_cli.py runs each)",
}
"""(file, first line) of a submitting block that is not run → why."""

PRELUDES: dict[tuple[str, str], str] = {
    (
        "docs/sdk.md",
        'estimate = client.jobs.estimate("examples/quickstart.json", training={"max_steps": 20_000})',
    ): "import ntklab\nclient = ntklab.Client()\n",
    (
        "docs/sdk.md",
        "x, y = np.random.randn(500, 8), np.random.randn(500, 1)",
    ): "import ntklab\nclient = ntklab.Client()\n",
    ("docs/sdk.md", "try:"): "import ntklab\nclient = ntklab.Client()\n",
    (
        "docs/models.md",
        "model = client.models.upload(module, x)        # any torch.nn.Module and a batch of its inputs",
    ): "import ntklab, numpy as np, torch\nclient = ntklab.Client()\n"
    "module, x = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)), torch.zeros(4, 8)\n"
    "data = client.datasets.upload(np.random.randn(64, 8), np.random.randn(64, 1))\n",
}
"""(file, first line) of a Python block that continues an earlier one → the names it uses, defined first."""


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def key(self) -> tuple[str, str]:
        """(file, its first line that is not blank, an import or a comment): what SKIPPED and PRELUDES name."""
        lines = [
            line
            for line in self.code.splitlines()
            if line.strip() and not re.match(r"\s*(import |from \S+ import |#)", line)
        ]
        return str(self.path.relative_to(REPO)), lines[0] if lines else ""

    @property
    def python(self) -> bool:
        return self.language == "python"

    def submits(self) -> bool:
        if self.python:
            return bool(SDK_SUBMITS.search(without_comments(self.code)))
        shell = without_comments(self.code)
        return bool(CURL_SUBMITS.search(shell) or CLI_SUBMITS.search(shell))


def without_comments(code: str) -> str:
    """The code with each `#` comment cut off (a `#` inside a string is not expected in the docs' blocks)."""
    return "\n".join(line.split(" #")[0] if not line.lstrip().startswith("#") else "" for line in code.splitlines())


def blocks() -> list[Block]:
    """Every fenced block of README.md and docs/*.md, with the line of its opening fence."""
    found = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        start = None
        for number, text in enumerate(lines, 1):
            fence = FENCE.match(text.strip())
            if fence and start is None:
                start, language = number, fence.group(1)
            elif fence and text.strip() == "```":
                found.append(Block(path, start, language, "\n".join(lines[start : number - 1])))
                start = None
    return found


SUBMITTING = [block for block in blocks() if block.submits()]


def test_every_submitting_block_is_run_or_skipped_with_a_reason():
    keys = {block.key for block in blocks()}
    assert SUBMITTING, "no submitting block found: the parser lost them"
    assert all(reason.strip() for reason in SKIPPED.values())
    assert set(SKIPPED) <= keys, f"SKIPPED names blocks that are gone: {set(SKIPPED) - keys}"
    assert set(PRELUDES) <= keys, f"PRELUDES names blocks that are gone: {set(PRELUDES) - keys}"
    assert not set(SKIPPED) & set(PRELUDES)


@pytest.fixture(scope="module")
def stack(postgres_redis_stack, tmp_path_factory):
    with served(postgres_redis_stack, tmp_path_factory.mktemp("docs-logs")) as live:
        yield live


JOB_ID, SWEEP_ID = re.compile(r"job_[0-9a-f]*…"), re.compile(r"swp_…")
SMALL = {"model": {"hidden": [16]}, "data": {"n_train": 8}, "training": {"max_steps": 2, "target_loss": None}}
LONG = {**SMALL, "training": {"max_steps": 100_000, "target_loss": None}}


def placeholder_ids(code: str, http: httpx.Client) -> dict[re.Pattern, str]:
    """The ids a reader pastes in for the block's `job_…` and `swp_…`, made for the block: a two-job sweep over
    model.hidden.0 (so that its plot has a line) and a finished job — or, for a block that cancels and then
    deletes its job, a job queued behind a long one, which is what that sequence succeeds on."""
    ids = {}
    if SWEEP_ID.search(code):
        sweep = {"base": SMALL, "grid": {"model.hidden.0": [8, 16]}}
        ids[SWEEP_ID] = http.post("/v1/sweeps", json=sweep).raise_for_status().json()["id"]
    if JOB_ID.search(code) and "/cancel" in code:
        wait_idle(http)
        http.post("/v1/jobs", json=LONG).raise_for_status()
        ids[JOB_ID] = http.post("/v1/jobs", json=SMALL).raise_for_status().json()["id"]
        return ids
    if JOB_ID.search(code):
        ids[JOB_ID] = http.post("/v1/jobs", json=SMALL).raise_for_status().json()["id"]
    wait_idle(http)
    return ids


def wait_idle(http: httpx.Client, timeout_s: float = BLOCK_TIMEOUT_S) -> None:
    """Until no job is queued or running."""
    deadline = time.monotonic() + timeout_s
    while http.get("/v1/jobs", params={"status": ["queued", "running"], "limit": 1}).json()["data"]:
        assert time.monotonic() < deadline, "jobs still queued or running"
        time.sleep(0.5)


def cancel_leftovers(http: httpx.Client) -> None:
    """Cancel every job still queued or running: a block's unawaited submissions must not delay the next block."""
    while page := http.get("/v1/jobs", params={"status": ["queued", "running"], "limit": 100}).json()["data"]:
        for job in page:
            http.post(f"/v1/jobs/{job['id']}/cancel")
        wait_idle(http)


def shell_script(block: Block, url: str, ids: dict[re.Pattern, str]) -> str:
    code = block.code.replace("http://127.0.0.1:8000", url)
    for placeholder, value in ids.items():
        code = placeholder.sub(value, code)
    return 'set -euo pipefail\ncurl() { command curl --fail-with-body --show-error "$@"; }\n' + code + "\n"


@pytest.mark.parametrize("block", SUBMITTING, ids=[block.name for block in SUBMITTING])
def test_block_runs_as_written(block, stack, tmp_path):
    if block.key in SKIPPED:
        pytest.skip(SKIPPED[block.key])
    (tmp_path / "examples").symlink_to(REPO / "examples")
    env = {
        **os.environ,
        "NTKLAB_URL": stack.url,
        "API": stack.url,
        "PYTHONPATH": str(REPO),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("NTKLAB_API_KEY", None)
    if block.python:
        script = tmp_path / "block.py"
        script.write_text(PRELUDES.get(block.key, "") + block.code.replace("http://127.0.0.1:8000", stack.url) + "\n")
        command = [sys.executable, str(script)]
    else:
        script = tmp_path / "block.sh"
        with httpx.Client(base_url=stack.url, timeout=30) as http:
            script.write_text(shell_script(block, stack.url, placeholder_ids(block.code, http)))
        command = ["bash", str(script)]
    try:
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    finally:
        with httpx.Client(base_url=stack.url, timeout=30) as http:
            cancel_leftovers(http)
    assert done.returncode == 0, f"{block.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

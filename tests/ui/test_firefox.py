"""The dashboard in Debian's headless Firefox ESR, driven over Marionette (Firefox's built-in remote protocol).

Playwright drives only its own patched Firefox build, so stock firefox-esr (installed by scripts/services.sh) is
started with `--marionette` on a fresh profile and driven by Mozilla's Python client, marionette_driver. Errors
are read from Firefox's console service (chrome context): every script error and CSP violation of a web page,
which is how the test sees "no JS errors" — and it then checks that it would have seen one.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from marionette_driver.keys import Keys
from marionette_driver.marionette import Marionette
from marionette_driver.wait import Wait

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

FIREFOX = Path("/usr/bin/firefox-esr")
JOB = {
    "name": "firefox-job",
    "model": {"hidden": [32], "output_activation": "swish"},
    "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4, "probe": {"n": 8}},
    "training": {"max_steps": 200, "target_loss": None, "lr": 0.05},
    "diagnostics": {"kernel": {"schedule": "every", "every": 20}},
}
WAIT_S = 240  # generous: other stacks may share the cores
# Firefox's console messages that are errors (nsIScriptError with the error flag) of a web page (a content window,
# not the browser's own chrome): script errors, CSP violations, failed module loads. The tab shows only the dashboard.
PAGE_ERRORS = """
return Services.console.getMessageArray()
  .filter((m) => m instanceof Ci.nsIScriptError && m.flags === Ci.nsIScriptError.errorFlag && !m.isFromChromeContext)
  .map((m) => `${m.category}: ${m.errorMessage} (${m.sourceName}:${m.lineNumber})`);
"""


@pytest.fixture(scope="module")
def firefox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Marionette]:
    """A headless firefox-esr on a fresh profile, Marionette on a free port (Firefox writes it to MarionetteActivePort)."""
    if not FIREFOX.exists():
        pytest.fail(
            f"{FIREFOX} is missing: run scripts/services.sh (as root it installs Debian's firefox-esr)", pytrace=False
        )
    profile = tmp_path_factory.mktemp("firefox-profile")
    (profile / "user.js").write_text('user_pref("marionette.port", 0);\n')
    # --remote-allow-system-access: Marionette may run scripts in the chrome context (the console service)
    command = [
        str(FIREFOX),
        "--headless",
        "--marionette",
        "--remote-allow-system-access",
        "--no-remote",
        "--profile",
        str(profile),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "MarionetteActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert process.poll() is None, "firefox-esr exited at start"
            assert time.monotonic() < deadline, "firefox-esr did not open its Marionette port"
            time.sleep(0.2)
        client = Marionette(host="127.0.0.1", port=int(port_file.read_text()))
        client.start_session()
        yield client
        client.delete_session()
    finally:
        process.terminate()
        process.wait(30)


def page_errors(client: Marionette) -> list[str]:
    with client.using_context("chrome"):
        return client.execute_script(PAGE_ERRORS)


def until(client: Marionette, script: str, *args):
    """Wait until the page's `script` (a function body of `arguments`) returns something truthy; return it."""
    return Wait(client, timeout=WAIT_S, interval=0.2).until(
        lambda c: c.execute_script(script, script_args=list(args)), message=script
    )


def test_firefox_shows_the_jobs_table_and_a_jobs_charts_without_errors(firefox, dashboard_stack, alice, keys):
    url = dashboard_stack.url
    done = alice.jobs.wait(alice.jobs.create(JOB).id, timeout=WAIT_S, progress=False)
    assert done.status == "succeeded", done.error

    firefox.navigate(f"{url}/ui/#/jobs")
    until(firefox, "return document.querySelector('#key-dialog').open")
    field = firefox.find_element("css selector", "#key-input")
    field.send_keys(keys["alice"])
    field.send_keys(Keys.ENTER)
    until(
        firefox,
        "return document.querySelector(`#jobs tr[data-job-id='${arguments[0]}'] [data-status='succeeded']`)",
        done.id,
    )
    assert (
        firefox.execute_script(
            "return document.querySelector(`#jobs tr[data-job-id='${arguments[0]}'] a`).textContent",
            script_args=[done.id],
        )
        == "firefox-job"
    )

    firefox.navigate(f"{url}/ui/#/jobs/{done.id}")
    final = httpx.get(
        f"{url}/v1/jobs/{done.id}/metrics?names=delta_k,delta_k_logits", headers={"X-API-Key": keys["alice"]}
    ).json()
    expected = sum(sum(v is not None and v > 0 for v in series["value"]) for series in final.values())  # log axis
    until(
        firefox,
        "return document.querySelector('#curves [data-chart=\"delta_k\"]')?.dataset.points === arguments[0]",
        str(expected),
    )
    drawn = firefox.execute_script(
        "return [...document.querySelectorAll('#curves .chart canvas')].map((c) => c.width * c.height).filter((a) => a > 0).length"
    )
    assert drawn >= 4, "loss, ΔK, weight change and linearization error are drawn on canvases"
    assert until(firefox, "return document.querySelector('main h1').textContent") == "firefox-job"

    # The error reader sees a CSP violation (an inline script the page's policy blocks), so an empty list means something.
    assert page_errors(firefox) == []
    firefox.execute_script(
        "document.body.append(Object.assign(document.createElement('script'), {textContent: 'document.body.dataset.ran = 1'}))"
    )
    errors = Wait(firefox, timeout=10).until(page_errors, message="the blocked inline script was not reported")
    assert len(errors) == 1 and errors[0].startswith("CSP"), errors
    assert firefox.execute_script("return document.body.dataset.ran === undefined"), (
        "the Content-Security-Policy blocks inline scripts in Firefox"
    )

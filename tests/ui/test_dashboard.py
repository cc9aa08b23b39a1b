"""The dashboard in a real headless Chromium against a live stack (API + worker, PostgreSQL + Redis, auth on).

One module-scoped stack and browser; each test opens its own browser context (its own sessionStorage, so
it is asked for its API key once). Everything the page shows comes from the public /v1 API.
"""

from __future__ import annotations

import ast
import json
import re
import time

import httpx
import numpy as np
import pytest
from playwright.sync_api import expect

from tests.upload_files import mlp_onnx

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

WATCH_MS = 240_000  # generous: the suite's other stacks may share the cores
# Watched live from running to succeeded: a 20 s time budget over 200 000 full-batch steps with the kernel every
# 160 steps, so the job page (polling every 3 s) sees ΔK(t) grow while the job runs however fast the machine is
# (the test stack flushes metrics every 0.2 s), and the job then ends as succeeded at its time budget.
LIVE_JOB = {
    "name": "dashboard-live",
    "tags": ["ui-live"],
    "model": {"hidden": [64], "output_activation": "swish"},
    "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4, "probe": {"n": 12}},
    "training": {"max_steps": 200_000, "target_loss": None, "lr": 0.05, "time_budget_s": 20},
    "diagnostics": {"kernel": {"schedule": "every", "every": 160}},
}
# Finished, then inspected: its curves, spec, kernels and spectra.
DONE_JOB = {
    "name": "dashboard-done",
    "tags": ["ui-live"],
    "model": {"hidden": [64], "output_activation": "swish"},
    "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4, "probe": {"n": 12}},
    "training": {"max_steps": 400, "target_loss": None, "lr": 0.05},
    "diagnostics": {
        "kernel": {"schedule": "every", "every": 40},
        "hessian": {"at": ["init", "final"], "top_k": 1, "probe_points": 2},
        "layer_sensitivity": True,
        "save_kernels": ["init", "final"],
    },
}
QUICK_JOB = {
    "model": {"hidden": [8]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 2, "probe": {"n": 4}},
    "training": {"max_steps": 2},
}
# Finished with three warnings: a sigmoid head cannot reach targets at −1, has φ''(0) = 0 under the Hessian
# measured by default, and 3 steps stop above target_loss.
WARNED_JOB = {
    "name": "dashboard-warned",
    "model": {"hidden": [8], "output_activation": "sigmoid"},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 2, "targets": "signed", "probe": {"n": 4}},
    "training": {"max_steps": 3, "target_loss": 1e-9},
}
QUIET_JOB = QUICK_JOB | {"name": "dashboard-quiet", "training": {"max_steps": 2, "target_loss": None}}  # no warning
HOSTILE_NAME = "<script>alert(1)</script>"
HOSTILE_TAG = "<img src=x onerror=alert(2)>"


def row(page, job_id: str):
    return page.locator(f'#jobs tr[data-job-id="{job_id}"]')


def sdk_spec(snippet: str) -> dict:
    """The spec in a "Copy as SDK" snippet: the string literal passed to json.loads, parsed (nothing is run)."""
    call = next(
        node
        for node in ast.walk(ast.parse(snippet))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "json.loads"
    )
    return json.loads(ast.literal_eval(call.args[0]))


def points(page, selector: str) -> int:
    return int(page.locator(selector).get_attribute("data-points") or 0)


def test_a_job_is_followed_live_from_the_jobs_table_to_its_kernels(dashboard_for, alice, keys):
    tab = dashboard_for(keys["alice"])
    page = tab.open("/jobs")
    job = alice.jobs.create(LIVE_JOB)

    expect(row(page, job.id).locator("[data-status]")).to_have_attribute("data-status", "running", timeout=WATCH_MS)
    row(page, job.id).get_by_role("link", name="dashboard-live").click()
    delta_k = page.locator('#curves [data-chart="delta_k"]')
    delta_k.wait_for(timeout=WATCH_MS)
    seen = points(page, '#curves [data-chart="delta_k"]')
    deadline = time.monotonic() + WATCH_MS / 1000
    while not (
        points(page, '#curves [data-chart="delta_k"]') > seen
        and page.locator("dd [data-status]").get_attribute("data-status") == "running"
    ):
        assert time.monotonic() < deadline, "the ΔK curve gained no point while the job ran"
        page.wait_for_timeout(200)
    expect(page.locator("dd [data-status]")).to_have_attribute("data-status", "succeeded", timeout=WATCH_MS)

    done = alice.jobs.wait(alice.jobs.create(DONE_JOB).id, timeout=WATCH_MS / 1000, progress=False)
    assert done.status == "succeeded", done.error
    page.goto(f"{tab.url}/ui/#/jobs/{done.id}")
    delta_k = page.locator('#curves [data-chart="delta_k"]')
    final = httpx.get(
        f"{tab.url}/v1/jobs/{done.id}/metrics?names=delta_k,delta_k_logits", headers={"X-API-Key": tab.key}
    ).json()
    expected = sum(
        sum(v is not None and v > 0 for v in series["value"]) for series in final.values()
    )  # log axis: ΔK(0) = 0 left out
    expect(delta_k).to_have_attribute("data-points", str(expected), timeout=WATCH_MS)
    page.get_by_role("button", name="Copy as SDK").click()
    assert sdk_spec(page.locator("#snippet").inner_text()) == alice.jobs.retrieve(done.id).spec
    page.click("#show-kernels")
    heatmap = page.locator('#kernels [data-kernel="kernel_init.npy"]')
    size = DONE_JOB["data"]["probe"]["n"] * done.spec["model"]["output_dim"]  # K is (n·O)×(n·O)
    expect(heatmap).to_have_attribute("data-shape", f"{size}×{size}", timeout=WATCH_MS)
    expect(heatmap).to_have_attribute("data-points", str(size * size))
    expect(heatmap.locator("canvas").first).to_be_visible()
    expect(page.locator('#kernels [data-chart="spectrum"]')).not_to_have_attribute("data-points", "0")
    tab.screenshot("job")

    page.goto(f"{tab.url}/ui/#/jobs")
    expect(row(page, job.id).locator("[data-status]")).to_have_attribute("data-status", "succeeded")
    expect(row(page, done.id).locator("[data-status]")).to_have_attribute("data-status", "succeeded")
    assert tab.errors == []


def test_a_preset_launched_from_the_page_shows_its_fitted_slope(dashboard_for, alice, keys):
    tab = dashboard_for(keys["alice"])
    page = tab.open("/sweeps")
    form = page.locator('form.launch[data-preset="param-check"]')
    form.locator("select").select_option("smoke")
    form.get_by_role("button", name="Launch").click()
    page.wait_for_url(re.compile(r".*#/sweeps/swp_.*"))
    sweep_id = page.url.rsplit("/", 1)[1]
    curves = alice.presets.run("fig1-time", scale="smoke")  # ΔK(t) of three heads, to overlay below

    expect(page.locator("main [data-status]").first).to_have_attribute("data-status", "succeeded", timeout=WATCH_MS)
    fits = alice.sweeps.retrieve(sweep_id).fits
    ntk = next(
        f for f in fits if f["y"] == "hessian_kernel_ratio_init" and f["group"] == {"model.parameterization": "ntk"}
    )
    slope = page.locator('#fits td.fit-slope[data-y="hessian_kernel_ratio_init"][data-group="ntk"]')
    assert float(slope.inner_text()) == pytest.approx(ntk["slope"], rel=1e-3)
    theory = page.locator('#fits td.fit-theory[data-y="hessian_kernel_ratio_init"][data-group="ntk"]')
    assert ntk["theory_slope"] is not None and float(theory.inner_text()) == ntk["theory_slope"]
    expect(page.locator("#fit-charts [data-fit]")).to_have_count(2)

    page.goto(f"{tab.url}/ui/#/sweeps")
    listed = page.locator(f'#sweeps tr[data-sweep-id="{sweep_id}"]')
    expect(listed.locator("[data-status]")).to_have_attribute("data-status", "succeeded", timeout=WATCH_MS)
    stated = api_get(tab, "/v1/presets")["data"]
    param_check = next(p for p in stated if p["name"] == "param-check")
    expect(
        page.locator('#presets tr[data-preset="param-check"] .theory[data-y="hessian_kernel_ratio_init"]')
    ).to_have_text(
        "hessian_kernel_ratio_init: "
        + ", ".join(f"{g} {s:g}" for g, s in param_check["theory"]["hessian_kernel_ratio_init"].items())
    )
    page.locator("#main form.filters select[name=status]").select_option("succeeded")
    page.locator("#main form.filters").get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r".*#/sweeps\?status=succeeded$"))
    succeeded = [s["id"] for s in api_get(tab, "/v1/sweeps?status=succeeded&limit=20")["data"]]
    expect(page.locator("#sweeps tbody tr")).to_have_count(len(succeeded))
    assert page.locator("#sweeps tbody tr").evaluate_all("rows => rows.map(r => r.dataset.sweepId)") == succeeded
    tab.screenshot("sweeps")

    alice.sweeps.wait(curves.id, progress=False)
    page.goto(f"{tab.url}/ui/#/compare?sweep={curves.id}&series=delta_k")
    overlay = alice.sweeps.retrieve(curves.id).table
    values = [
        np.asarray(alice.jobs.metrics(row.job_id, names=["delta_k"])["delta_k"].value, dtype=float) for row in overlay
    ]
    expected = sum(int((np.isfinite(v) & (v > 0)).sum()) for v in values)  # a log axis: ΔK(0) = 0 left out
    expect(page.locator("#compare-chart")).to_have_attribute("data-points", str(expected), timeout=WATCH_MS)
    tab.screenshot("compare")
    assert tab.errors == []


def test_another_key_sees_none_of_the_jobs_and_names_render_as_text(dashboard_for, alice, keys):
    hostile = alice.jobs.create(QUICK_JOB | {"name": HOSTILE_NAME, "tags": [HOSTILE_TAG]})
    tab = dashboard_for(keys["alice"])
    page = tab.open("/jobs")
    link = row(page, hostile.id).get_by_role("link", name=HOSTILE_NAME)
    expect(link).to_have_text(HOSTILE_NAME)
    expect(row(page, hostile.id).locator(".tag")).to_have_text(HOSTILE_TAG)
    expect(page.locator("#jobs script, #jobs img")).to_have_count(0)
    tab.screenshot("jobs")
    link.click()
    expect(page.locator("main h1")).to_have_text(HOSTILE_NAME)
    expect(page.locator("#spec")).to_contain_text(HOSTILE_NAME)
    assert tab.dialogs == []

    bob = dashboard_for(keys["bob"])
    page = bob.open("/jobs")
    expect(page.locator("#jobs tbody tr")).to_have_count(0)
    expect(page.get_by_text("No jobs.")).to_be_visible()
    page.goto(f"{bob.url}/ui/#/jobs/{hostile.id}")
    expect(page.locator("main .error")).to_contain_text("no such job")
    assert bob.dialogs == []


def test_a_job_page_lists_the_jobs_warnings_by_code_and_message(dashboard_for, alice, keys):
    job = alice.jobs.wait(alice.jobs.create(WARNED_JOB).id, timeout=WATCH_MS / 1000, progress=False)
    assert {w.code for w in job.warnings} == {
        "head_cannot_reach_targets",
        "head_curvature_zero",
        "target_loss_not_reached",
    }
    tab = dashboard_for(keys["alice"])
    page = tab.open(f"/jobs/{job.id}")
    expect(page.locator("#warnings li")).to_have_count(len(job.warnings))
    for warning in job.warnings:
        expect(page.locator(f'#warnings li[data-code="{warning.code}"]')).to_have_text(
            f"{warning.code}: {warning.message}"
        )
    quiet = alice.jobs.wait(alice.jobs.create(QUIET_JOB).id, timeout=WATCH_MS / 1000, progress=False)
    assert quiet.warnings == []
    page.goto(f"{tab.url}/ui/#/jobs/{quiet.id}")
    expect(page.locator("main h1")).to_have_text("dashboard-quiet")
    expect(page.locator("#warnings")).to_have_count(0)
    assert tab.errors == []


def test_a_job_page_shows_the_estimate_the_dry_run_answered(dashboard_for, alice, keys):
    dry = alice.jobs.estimate(QUICK_JOB | {"name": "ui-estimate"})
    job = alice.jobs.create(QUICK_JOB | {"name": "ui-estimate"})
    tab = dashboard_for(keys["alice"])
    page = tab.open(f"/jobs/{job.id}")
    timed = [phase for phase in dry.phases if phase.seconds > 0]
    expect(page.locator("#estimate-phases tbody tr")).to_have_count(len(timed))
    expect(page.locator("#estimate-phases tbody tr").first).to_have_attribute("data-phase", timed[0].name)
    expect(page.locator("#estimate-total")).to_contain_text(" s, ")
    expect(page.locator("#estimate")).to_contain_text(f"{dry.rates.source}: {dry.rates.detail}")
    shown = float(page.locator("#estimate-total").inner_text().split(" s,")[0])
    assert shown == pytest.approx(dry.seconds, rel=1e-3)
    assert tab.errors == []


# Every element of a page that must fit the window's width: the document, main and its blocks, sections and figures.
OVERFLOWING = """() => [document.documentElement, ...document.querySelectorAll(
    "main, main > *, main section, main figure, main .charts, main .figures, main table")]
  .filter((e) => e.scrollWidth > e.clientWidth + 1)
  .map((e) => `${e.tagName.toLowerCase()}${e.id ? "#" + e.id : ""}: scrollWidth ${e.scrollWidth} > clientWidth ${e.clientWidth}`)"""
NARROW = {"width": 1024, "height": 800}  # a laptop's window; the screenshots are taken at the fixtures' 1400 px


def assert_fits_narrow_window(page) -> None:
    """No horizontal overflow at NARROW, once the charts have redrawn at its width; the viewport is then put back."""
    size = page.viewport_size
    page.set_viewport_size(NARROW)
    page.wait_for_timeout(300)
    assert page.evaluate(OVERFLOWING) == []
    page.set_viewport_size(size)
    page.wait_for_timeout(300)


def test_a_job_page_states_the_model_wraps_the_summary_and_logs_both_dks(dashboard_for, alice, keys):
    done = alice.jobs.wait(
        alice.jobs.create(DONE_JOB | {"name": "ui-model"}).id, timeout=WATCH_MS / 1000, progress=False
    )
    tab = dashboard_for(keys["alice"])
    page = tab.open(f"/jobs/{done.id}")
    expect(page.locator("#model")).to_have_text(
        f"mlp, hidden widths 64, relu, swish head, ntk parameterization, {done.spec['model']['output_dim']} outputs, "
        f"{done.parameters} parameters"
    )
    timings = done.summary["timings"]
    phases = page.locator('#summary tr[data-name="timings"] table.nested th')
    expect(phases).to_have_count(len(timings))
    assert phases.all_inner_texts() == list(timings)
    delta_k = page.locator('#curves [data-chart="delta_k"]')
    expect(delta_k).to_have_attribute("data-y-axis", "log")
    expect(delta_k.locator("ul.legend li")).to_have_text(["ΔK of the outputs φ(f)", "ΔK of the logits f"])
    series = api_get(tab, f"/v1/jobs/{done.id}/metrics?names=delta_k,delta_k_logits")
    assert 0 < max(series["delta_k_logits"]["value"]) < max(series["delta_k"]["value"])
    positive = sum(v is not None and v > 0 for s in series.values() for v in s["value"])
    expect(delta_k).to_have_attribute("data-points", str(positive))
    expect(delta_k.locator("figcaption sub")).to_have_text(
        ["t", "0", "F", "0", "F"]
    )  # ‖K(w_t) − K(w_0)‖_F / ‖K(w_0)‖_F
    expect(page.locator("#estimate-phases tbody tr").first).to_be_visible()
    assert_fits_narrow_window(page)
    assert tab.errors == []


def test_the_jobs_table_has_a_model_column_and_fits_a_narrow_window(dashboard_for, alice, keys):
    upload = alice.models.upload(mlp_onnx(), name="tiny-onnx-mlp")
    data = {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 3, "probe": {"n": 4}}
    onnx_job = alice.jobs.create(
        {"model": {"kind": "onnx", "id": upload.id}, "data": data, "training": {"max_steps": 2}, "tags": ["ui-model"]}
    )
    deep = alice.jobs.create(
        QUICK_JOB
        | {"tags": ["ui-model"], "model": {"hidden": [16, 16], "activation": "tanh", "output_activation": "swish"}}
    )
    plain = alice.jobs.create(QUICK_JOB | {"tags": ["ui-model"]})
    tab = dashboard_for(keys["alice"])
    page = tab.open("/jobs?tag=ui-model")
    column = page.locator("#jobs thead th").all_inner_texts().index("model")
    cells = {job.id: row(page, job.id).locator("td").nth(column) for job in (onnx_job, deep, plain)}
    expect(cells[plain.id]).to_have_text("mlp 8 relu")
    expect(cells[deep.id]).to_have_text("mlp 16-16 tanh → swish")
    expect(cells[onnx_job.id]).to_have_text("onnx “tiny-onnx-mlp”")
    assert_fits_narrow_window(page)

    page.goto(f"{tab.url}/ui/#/jobs/{onnx_job.id}")
    expect(page.locator("#model")).to_have_text(
        f"ONNX upload “tiny-onnx-mlp”, linear head, 2 outputs, {upload.parameters} parameters"
    )
    assert tab.errors == []


SEEDED_SWEEP = {  # 2 widths × 2 heads × 2 seeds, stopped after 3 steps above target: every point warns
    "name": "ui-seeds",
    "tags": ["ui-seeds"],
    "base": {
        "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 2, "probe": {"n": 4}},
        "training": {"max_steps": 3, "target_loss": 1e-9},
        "diagnostics": {"kernel": {"schedule": "every", "every": 1}},
    },
    "grid": {"model.hidden.0": [16, 64], "model.output_activation": ["identity", "swish"], "seed": [0, 1]},
    "fits": [
        {
            "y": "delta_k_max",
            "x": "model.hidden.0",
            "group_by": ["model.output_activation"],
            "theory": {"linear head": -0.5, "swish head": 0.0},
        }
    ],
}


def test_a_sweep_page_draws_seed_error_bars_legends_and_warnings_across_the_page(dashboard_for, alice, keys):
    sweep = alice.sweeps.wait(alice.sweeps.create(SEEDED_SWEEP).id, progress=False)
    assert sweep.status == "succeeded"
    tab = dashboard_for(keys["alice"])
    page = tab.open(f"/sweeps/{sweep.id}")
    figure = page.locator('#fit-charts figure[data-fit="delta_k_max vs model.hidden.0"]')
    expect(figure).to_have_attribute("data-points", "4")
    expect(figure).to_have_attribute("data-error-bars", "4")  # each group's two widths, mean ± std over two seeds
    expect(figure).to_have_attribute("data-y-axis", "log")
    expect(figure.locator("figcaption")).to_have_text("ΔK against width m (log–log)")
    legend = figure.locator("ul.legend li")
    expect(legend).to_have_count(2)
    for fit, entry in zip(sweep.fits, legend.all()):
        expect(entry).to_have_attribute("data-group", fit["group_label"])
        shown = re.search(r"slope (-?[0-9.e+-]+)", entry.inner_text()).group(1)
        assert float(shown) == pytest.approx(fit["slope"], rel=1e-3, abs=1e-6)
        expect(entry).to_contain_text(f"theory slope {fit['theory_slope']:g} (dashed)")
        expect(entry).to_contain_text("mean ± std over 2 runs")
    warnings = [(fit["group_label"], w["code"], w["message"]) for fit in sweep.fits for w in fit["warnings"]]
    assert any(code == "target_loss_not_reached" for _, code, _ in warnings)
    expect(figure.locator(".fit-warnings li")).to_have_text(
        [f"{group}: {code}: {message}" for group, code, message in warnings]
    )
    main_width = page.locator("main").evaluate("m => m.clientWidth")
    assert figure.locator("canvas").first.evaluate("c => c.getBoundingClientRect().width") > 0.9 * main_width
    expect(page.locator('#grid dd[data-axis="model.output_activation"]')).to_have_text("identity; swish")
    expect(page.locator('#sweep-jobs td[data-path="model.output_activation"]').first).to_have_text("identity")
    tab.screenshot("sweep")
    assert_fits_narrow_window(page)

    page.goto(f"{tab.url}/ui/#/sweeps")
    expect(page.locator(f'#sweeps tr[data-sweep-id="{sweep.id}"]')).to_have_count(1)
    assert_fits_narrow_window(page)
    assert tab.errors == []


def api_get(tab, path: str):
    """GET `path` from the API with the tab's key: what the page should show."""
    answer = httpx.get(f"{tab.url}{path}", headers={"X-API-Key": tab.key})
    answer.raise_for_status()
    return answer.json()


def api_status(tab, job_id: str) -> int:
    return httpx.get(f"{tab.url}/v1/jobs/{job_id}", headers={"X-API-Key": tab.key}).status_code


def test_cancel_and_delete_happen_only_when_confirmed(dashboard_for, alice, keys):
    finished = alice.jobs.wait(
        alice.jobs.create(QUICK_JOB | {"name": "ui-delete", "tags": ["ui-actions"]}).id,
        timeout=WATCH_MS / 1000,
        progress=False,
    )
    running = alice.jobs.create(LIVE_JOB | {"name": "ui-cancel", "tags": ["ui-actions"]})
    tab = dashboard_for(keys["alice"])
    page = tab.open("/jobs?tag=ui-actions")
    actions = []
    page.on("request", lambda r: actions.append(f"{r.method} {r.url}") if r.method in ("POST", "DELETE") else None)
    expect(row(page, running.id).get_by_role("button", name="Cancel")).to_be_enabled(timeout=WATCH_MS)
    expect(row(page, finished.id).get_by_role("button", name="Cancel")).to_be_disabled()
    expect(row(page, running.id).get_by_role("button", name="Delete")).to_be_disabled()

    tab.confirming = False
    row(page, running.id).get_by_role("button", name="Cancel").click()
    row(page, finished.id).get_by_role("button", name="Delete").click()
    with page.expect_response(re.compile(r".*/v1/jobs\?.*tag=ui-actions.*")):  # the table's next refresh
        pass
    assert tab.dialogs == ["Cancel job “ui-cancel”?", "Delete job “ui-delete” and all its results?"]
    assert actions == []
    assert alice.jobs.retrieve(running.id).cancel_requested is False and api_status(tab, finished.id) == 200
    expect(row(page, finished.id)).to_have_count(1)

    tab.confirming = True
    row(page, running.id).get_by_role("button", name="Cancel").click()
    expect(row(page, running.id).locator("[data-status]")).to_have_attribute(
        "data-status", "cancelled", timeout=WATCH_MS
    )
    assert alice.jobs.retrieve(running.id).status == "cancelled"
    row(page, finished.id).get_by_role("button", name="Delete").click()
    expect(row(page, finished.id)).to_have_count(0)
    assert api_status(tab, finished.id) == 404
    assert actions == [f"POST {tab.url}/v1/jobs/{running.id}/cancel", f"DELETE {tab.url}/v1/jobs/{finished.id}"]
    assert tab.errors == []


def test_the_keyboard_reaches_a_job_row_and_enter_opens_it(dashboard_for, alice, keys):
    job = alice.jobs.create(QUICK_JOB | {"name": "ui-keyboard-job", "tags": ["ui-keyboard"]})
    tab = dashboard_for(keys["alice"])
    page = tab.open("/jobs?tag=ui-keyboard")
    link = row(page, job.id).get_by_role("link", name="ui-keyboard-job")
    link.wait_for()
    for _ in range(30):
        page.keyboard.press("Tab")
        if link.evaluate("a => a === document.activeElement"):
            break
    else:
        pytest.fail("Tab never reached the job's link")
    assert link.evaluate("a => a.matches(':focus-visible') && getComputedStyle(a).outlineStyle === 'solid'")
    assert row(page, job.id).evaluate("r => getComputedStyle(r).backgroundColor") == "rgb(238, 244, 255)"
    with page.expect_response(re.compile(r".*/v1/jobs\?.*tag=ui-keyboard.*")):  # a refresh keeps the focus
        pass
    page.wait_for_timeout(100)
    assert link.evaluate("a => a === document.activeElement")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(rf".*#/jobs/{job.id}$"))
    expect(page.locator("main h1")).to_have_text("ui-keyboard-job")
    assert tab.errors == []


def test_the_jobs_table_pages_through_the_api_cursor(dashboard_for, alice, keys):
    ids = [alice.jobs.create(QUICK_JOB | {"tags": ["ui-paging"]}).id for _ in range(23)]
    newest_first = ids[::-1]
    tab = dashboard_for(keys["alice"])
    page = tab.open("/jobs?tag=ui-paging")
    shown = page.locator("#jobs tbody tr")
    expect(shown).to_have_count(20)
    assert shown.evaluate_all("rows => rows.map(r => r.dataset.jobId)") == newest_first[:20]
    page.get_by_role("link", name="Next page").click()
    expect(shown).to_have_count(3)
    assert shown.evaluate_all("rows => rows.map(r => r.dataset.jobId)") == newest_first[20:]
    expect(page.get_by_role("link", name="Next page")).to_have_count(0)
    page.go_back()
    expect(shown).to_have_count(20)
    assert shown.evaluate_all("rows => rows.map(r => r.dataset.jobId)") == newest_first[:20]
    page.get_by_role("link", name="Next page").click()
    page.get_by_role("link", name="First page").click()
    expect(shown).to_have_count(20)
    assert tab.errors == []

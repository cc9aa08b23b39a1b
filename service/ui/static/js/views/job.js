// One job: facts (the model in words among them) and actions, live curves while it runs, kernel heatmaps and spectra, layer sensitivity,
// the estimate from its spec, the spec with copy-as-curl / SDK, artifact downloads. While the job is unfinished it makes one request every
// POLL_MS, GET /v1/jobs/{id}/updates?since_step=…: the job's row and only the metric points it does not hold yet.

import { download, getBytes, getJson, query, send } from "../api.js";
import { chartFigure, heatmap, lineChart, spectrumChart } from "../charts.js";
import { duration, el, fmt, statusBadge, table } from "../dom.js";
import { math } from "../math.js";
import { describeModel, uploadName } from "../model.js";
import { parseNpy } from "../npy.js";
import { poll } from "../poller.js";
import { JOB_CHARTS, SERIES_LABELS } from "../series.js";

export const POLL_MS = 3000;
const FINISHED = new Set(["succeeded", "failed", "cancelled"]);
const MAX_SPECTRUM_N = 400;

/** The job's facts; `model` is its model in words (the spec's, which GET …/updates leaves out). */
function facts(job, model) {
  const p = job.progress || {};
  const rows = [
    ["id", job.id],
    ["model", el("span", { id: "model" }, model)],
    ["status", statusBadge(job.status)],
    ["progress", job.status === "running" ? `${p.step ?? 0} / ${p.total ?? "?"} (${p.phase ?? "…"}), ETA ${duration(p.eta_s)}` : "—"],
    ["device", job.device ?? "—"],
    ["tags", job.tags.length ? job.tags.map((tag) => el("span", { class: "tag" }, tag)) : "—"],
    ["sweep", job.sweep_id ? el("a", { href: `#/sweeps/${encodeURIComponent(job.sweep_id)}` }, job.sweep_id) : "—"],
    ["created / finished", `${new Date(job.created_at).toLocaleString()} / ${job.finished_at ? new Date(job.finished_at).toLocaleString() : "—"}`],
  ];
  if (job.error) rows.push(["error", `${job.error.type}: ${job.error.message}`]);
  return el("dl", { class: "facts" }, rows.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
}

/** The job's warnings (results not to read at face value, docs/diagnostics.md "Warnings"), code and message: [] or [section]. */
function warningList(job) {
  const warnings = job.warnings || [];
  return warnings.length ? [el("section", { id: "warnings" }, el("h2", {}, "Warnings"),
    el("ul", {}, warnings.map((w) => el("li", { class: "warning", dataset: { code: w.code } }, el("code", {}, w.code), ": ", w.message))))] : [];
}

/** The job's estimate from its spec (the dry run's answer): seconds, FLOPs and peak memory, the rates and where they
 * come from, and the phases that take time, largest first: [] or [section]. */
function estimateSection(job) {
  const estimate = job.estimate;
  if (!estimate) return [];
  const rates = estimate.rates;
  const phases = estimate.phases.filter((phase) => phase.seconds > 0).map((phase) => el("tr", { dataset: { phase: phase.name } },
    el("td", {}, phase.name), el("td", { class: "num" }, fmt(phase.seconds)), el("td", { class: "num" }, fmt(phase.flops)),
    el("td", { class: "num" }, fmt(phase.operations)), el("td", {}, phase.what)));
  return [el("section", { id: "estimate" }, el("h2", {}, "Estimate"),
    el("p", { id: "estimate-total" }, `${fmt(estimate.seconds)} s, ${fmt(estimate.flops)} FLOPs, peak memory `,
      `${fmt(estimate.memory_bytes / 2 ** 20)} MiB`),
    rates ? el("p", { class: "muted" }, `at ${fmt(rates.flops_per_s)} FLOP/s and ${fmt(rates.seconds_per_op)} s per operation `,
      `(${rates.source}: ${rates.detail})`) : null,
    table(["phase", "seconds", "FLOPs", "operations", "how"], phases, { id: "estimate-phases" }))];
}

/** Cancel, delete and compare for the job `current()` returns; `update(job)` sets which buttons apply. */
function actions(current, reload) {
  const cancel = el("button", { type: "button" }, "Cancel");
  const remove = el("button", { type: "button" }, "Delete");
  const path = () => `/v1/jobs/${encodeURIComponent(current().id)}`;
  const label = () => current().name || current().id;
  cancel.addEventListener("click", async () => {
    if (window.confirm(`Cancel job “${label()}”?`)) await send("POST", `${path()}/cancel`).catch((e) => window.alert(e.message));
    reload();
  });
  remove.addEventListener("click", async () => {
    if (!window.confirm(`Delete job “${label()}” and all its results?`)) return;
    try {
      await send("DELETE", path());
      location.hash = "#/jobs";
    } catch (error) {
      window.alert(error.message);
    }
  });
  const compare = el("a", {}, "Compare with other jobs");
  const bar = el("p", { class: "toolbar" }, cancel, remove, compare);
  const update = (job) => {
    compare.href = `#/compare?jobs=${encodeURIComponent(job.id)}`;
    cancel.disabled = FINISHED.has(job.status);
    remove.disabled = !FINISHED.has(job.status);
  };
  return { bar, update };
}

/** One chart per JOB_CHARTS entry that has at least one recorded series. */
function drawCurves(container, metrics) {
  for (const chart of JOB_CHARTS) {
    const series = chart.names.filter((name) => metrics[name]).map((name) => ({ name, label: SERIES_LABELS[name], ...metrics[name] }));
    if (!series.length) continue;
    const key = chart.id || chart.names[0];
    let figure = container.querySelector(`[data-chart="${key}"]`);
    if (!figure) container.append((figure = chartFigure({ dataset: { chart: key } }, chart.title)));
    lineChart(figure, { series, logY: chart.logY });
  }
}

/** Python string literal of `text` (JSON string escapes are valid Python escapes). */
const pythonString = (text) => JSON.stringify(text);

function snippets(spec) {
  const body = JSON.stringify(spec);
  const origin = location.origin;
  return {
    curl: `curl -s -X POST ${origin}/v1/jobs -H 'Content-Type: application/json' -H "X-API-Key: $NTKLAB_API_KEY" \\\n  -d '${body.replaceAll("'", "'\\''")}'`,
    SDK: `import json\nimport ntklab\n\nclient = ntklab.Client(${pythonString(origin)})  # NTKLAB_API_KEY from the environment\njob = client.jobs.create(json.loads(${pythonString(body)}))\nprint(client.jobs.wait(job.id).summary)`,
  };
}

function specSection(job) {
  const shown = el("pre", { id: "snippet", hidden: true });
  const buttons = Object.entries(snippets(job.spec || {})).map(([kind, text]) => {
    const button = el("button", { type: "button" }, `Copy as ${kind}`);
    button.addEventListener("click", async () => {
      shown.hidden = false;
      shown.textContent = text;
      await navigator.clipboard?.writeText(text).catch(() => {});
    });
    return button;
  });
  return el("section", {}, el("h2", {}, "Spec"), el("p", { class: "toolbar" }, buttons), shown,
    el("pre", { id: "spec" }, JSON.stringify(job.spec, null, 2)));
}

/** A summary value as text; a group of values (timings: seconds per phase) as a nested name / value table. */
function summaryValue(value) {
  if (value === null || typeof value !== "object") return typeof value === "number" ? fmt(value) : String(value);
  if (Array.isArray(value)) return value.map(summaryValue).join(", ");
  return el("table", { class: "nested" }, el("tbody", {}, Object.entries(value).map(([name, item]) =>
    el("tr", {}, el("th", { scope: "row" }, name), el("td", { class: "num" }, summaryValue(item))))));
}

function summaryTable(summary) {
  return table(["name", "value"], Object.entries(summary || {}).map(([name, value]) =>
    el("tr", { dataset: { name } }, el("td", {}, name), el("td", { class: "num" }, summaryValue(value)))), { id: "summary" });
}

/** Eigenvalues of a symmetric n×n matrix (descending), by ml-matrix's symmetric eigendecomposition. */
function eigenvalues(data, n) {
  const { Matrix, EigenvalueDecomposition } = window.mlMatrix;
  const rows = Array.from({ length: n }, (_, i) => Array.from(data.subarray(i * n, (i + 1) * n)));
  return new EigenvalueDecomposition(new Matrix(rows), { assumeSymmetric: true }).realEigenvalues.sort((a, b) => b - a);
}

async function showKernels(container, job, names) {
  container.replaceChildren(el("p", { class: "muted" }, "Loading kernels…"));
  const spectra = [];
  const boxes = [];
  for (const name of names) {
    const { shape, data } = parseNpy(await getBytes(`/v1/jobs/${encodeURIComponent(job.id)}/artifacts/${encodeURIComponent(name)}`));
    const box = chartFigure({ dataset: { kernel: name, shape: shape.join("×") } }, `${name} (${shape[0]}×${shape[0]})`, { tall: true });
    boxes.push([box, data, shape[0]]);
    if (shape[0] <= MAX_SPECTRUM_N) spectra.push({ name, values: eigenvalues(data, shape[0]) });
  }
  const spectrum = chartFigure({ dataset: { chart: "spectrum" } }, "kernel eigenvalues λ_i, descending (log axis)", { tall: true });
  container.replaceChildren(el("div", { class: "charts" }, boxes.map(([box]) => box), spectrum));
  boxes.forEach(([box, data, n]) => heatmap(box, { data, n }));
  if (spectra.length) spectrumChart(spectrum, { spectra });
  else spectrum.replaceChildren(el("p", { class: "muted" }, `spectra are computed here for n ≤ ${MAX_SPECTRUM_N}; the summary has `,
    math("λ_min"), " and ", math("λ_max")));
}

async function sensitivityTable(job) {
  const report = await getJson(`/v1/jobs/${encodeURIComponent(job.id)}/artifacts/layer_sensitivity.json`);
  const rows = Object.entries(report).flatMap(([when, layers]) => layers.map((layer) =>
    el("tr", {}, el("td", {}, when), el("td", {}, layer.layer), el("td", { class: "num" }, fmt(layer.linf)), el("td", { class: "num" }, fmt(layer.l2)))));
  return table(["at", "layer l", math("‖∂f/∂α^(l)‖_∞"), math("‖∂f/∂α^(l)‖_2")], rows);
}

async function results(container, job) {
  const list = await getJson(`/v1/jobs/${encodeURIComponent(job.id)}/artifacts`);
  const order = (name) => (name.includes("logits") ? 2 : 0) + (name.includes("final") ? 1 : 0);
  const kernels = list.data.map((a) => a.name).filter((name) => /^kernel.*\.npy$/.test(name)).sort((a, b) => order(a) - order(b));
  const kernelBox = el("div", { id: "kernels" });
  const showButton = el("button", { type: "button", id: "show-kernels", disabled: !kernels.length }, "Show kernel heatmaps and spectra");
  showButton.addEventListener("click", () => showKernels(kernelBox, job, kernels).catch((e) => kernelBox.replaceChildren(el("p", { class: "error" }, e.message))));
  const downloads = list.data.map((artifact) => {
    const button = el("button", { type: "button" }, "Download");
    button.addEventListener("click", () => download(`/v1/jobs/${encodeURIComponent(job.id)}/artifacts/${encodeURIComponent(artifact.name)}`, artifact.name));
    return el("tr", {}, el("td", {}, artifact.name), el("td", {}, artifact.media_type), el("td", { class: "num" }, artifact.size), el("td", {}, button));
  });
  const sections = [
    el("section", {}, el("h2", {}, "Summary"), summaryTable(job.summary)),
    el("section", {}, el("h2", {}, "Kernels"), el("p", {}, showButton), kernelBox),
  ];
  if (list.data.some((a) => a.name === "layer_sensitivity.json")) {
    sections.push(el("section", {}, el("h2", {}, "Layer sensitivity"), await sensitivityTable(job)));
  }
  sections.push(el("section", {}, el("h2", {}, "Artifacts"), table(["name", "type", "bytes", ""], downloads, { id: "artifacts" })));
  container.replaceChildren(...sections);
}

/** Append to `held` ({name: {step, value}}) the points of `update` each series does not hold yet; how many. */
function merge(held, update) {
  let added = 0;
  for (const [name, series] of Object.entries(update)) {
    const mine = (held[name] ||= { step: [], value: [] });
    const last = mine.step.length ? mine.step[mine.step.length - 1] : -Infinity;
    series.step.forEach((step, i) => {
      if (step <= last) return;
      mine.step.push(step);
      mine.value.push(series.value[i]);
      added += 1;
    });
  }
  return added;
}

/**
 * The step to ask for points after: one less than the last step held. The worker writes the points in the order
 * they were measured, several series per step, and a write may fall between two series of the same step, so
 * the last step held may still gain points; merge() drops the ones already held.
 */
function sinceStep(held) {
  const last = Math.max(-1, ...Object.values(held).map((s) => (s.step.length ? s.step[s.step.length - 1] : -1)));
  return last >= 1 ? last - 1 : null;
}

export async function render(root, { args: [id], onLeave }) {
  const path = `/v1/jobs/${encodeURIComponent(id)}`;
  const title = el("h1");
  const factsBox = el("div");
  const curves = el("div", { class: "charts", id: "curves" });
  const finished = el("div");
  let job = null;
  let model = "";
  let held = {};
  const toolbar = actions(() => job, () => refresh());

  function show(next) {
    job = next;
    title.textContent = job.name || job.id;
    factsBox.replaceChildren(facts(job, model), ...warningList(job));
    toolbar.update(job);
  }

  /** The job with its spec and every point: on opening, and once when it has finished (results, final series). */
  async function readAll() {
    const next = await getJson(path);
    const spec = next.spec.model;
    model = describeModel(spec, next.parameters, spec.kind === "onnx" ? await uploadName(spec.id) : undefined);
    show(next);
    if (!root.contains(title)) {
      root.append(title, factsBox, toolbar.bar, el("section", {}, el("h2", {}, "Curves"), curves), finished, ...estimateSection(job),
        specSection(job));
    }
    held = await getJson(`${path}/metrics`);
    drawCurves(curves, held);
    if (FINISHED.has(job.status)) await results(finished, job);
  }

  /** One request per interval while the job is unfinished: its row and the points after the ones held. */
  async function refresh() {
    if (FINISHED.has(job.status)) return false;
    const update = await getJson(`${path}/updates${query({ since_step: sinceStep(held) })}`);
    // Finished: read the spec, every point (the worker may replace a series it recomputed) and the results once.
    // A new attempt records its series from step 0 again: read them afresh.
    if (FINISHED.has(update.job.status) || update.job.attempts !== job.attempts) {
      await readAll();
      return !FINISHED.has(job.status);
    }
    show(update.job);
    if (merge(held, update.metrics)) drawCurves(curves, held);
    return true;
  }

  await readAll();
  if (!FINISHED.has(job.status)) onLeave(poll(refresh, POLL_MS, { wait: true }));
}

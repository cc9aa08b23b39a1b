// Compare: overlay one metric series of several jobs, picked by id or as every job of a sweep. Read once, on demand.

import { getJson, query } from "../api.js";
import { chartFigure, lineChart } from "../charts.js";
import { el } from "../dom.js";
import { COMPARABLE, SERIES_LABELS } from "../series.js";

/** [{id, label}] of the jobs to overlay: the listed ids, or a sweep's rows labelled by their grid values. */
async function pickJobs(params) {
  const sweepId = params.get("sweep");
  if (sweepId) {
    const sweep = await getJson(`/v1/sweeps/${encodeURIComponent(sweepId)}${query({ limit: 200 })}`);
    return sweep.table.map((row) => ({
      id: row.job_id,
      label: Object.entries(row.values).map(([path, value]) => `${path}=${JSON.stringify(value)}`).join(", ") || row.job_id,
    }));
  }
  const ids = (params.get("jobs") || "").split(",").map((id) => id.trim()).filter(Boolean);
  return Promise.all(ids.map(async (id) => {
    const job = await getJson(`/v1/jobs/${encodeURIComponent(id)}`);
    return { id, label: job.name ? `${job.name} (${id})` : id };
  }));
}

function form(params) {
  const jobs = el("input", { name: "jobs", value: params.get("jobs") || "", size: 48, placeholder: "job_…, job_…" });
  const sweep = el("input", { name: "sweep", value: params.get("sweep") || "", size: 24, placeholder: "swp_…" });
  const series = el("select", { name: "series" },
    Object.keys(COMPARABLE).map((name) => el("option", { value: name, selected: (params.get("series") || "delta_k") === name }, name)));
  const box = el("form", { class: "filters" }, el("label", {}, "job ids", jobs), el("label", {}, "or a sweep", sweep),
    el("label", {}, "series", series), el("button", { type: "submit" }, "Overlay"));
  box.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/compare${query({ jobs: jobs.value.trim(), sweep: sweep.value.trim(), series: series.value })}`;
  });
  return box;
}

export async function render(root, { params }) {
  const name = params.get("series") || "delta_k";
  const chart = chartFigure({ id: "compare-chart" }, `${SERIES_LABELS[name] ?? name} of each job`, { tall: true });
  root.append(el("h1", {}, "Compare"), form(params), chart);
  const picked = await pickJobs(params);
  if (!picked.length) {
    chart.replaceWith(el("p", { class: "muted" }, "Pick jobs (ids, or tick them in the Jobs table) or a sweep."));
    return;
  }
  const series = await Promise.all(picked.map(async ({ id, label }) => {
    const metrics = await getJson(`/v1/jobs/${encodeURIComponent(id)}/metrics${query({ names: name })}`);
    return { name: label, ...(metrics[name] || { step: [], value: [] }) };
  }));
  lineChart(chart, { series, logY: COMPARABLE[name] ?? false });
}

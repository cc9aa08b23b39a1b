// One sweep: progress of its jobs, its grid as text, one full-width log–log fit plot per (y, x) pair (each group's
// seed means with mean ± std bars, its fitted line and the theory's slope dashed where the fit states one; the
// legend gives slope, 95% interval and R²) with the fits' warnings under it, the fits and the jobs table. While it
// has unfinished jobs it re-reads GET /v1/sweeps/{id} (one request) every POLL_MS.

import { getJson, query } from "../api.js";
import { chartFigure, fitChart } from "../charts.js";
import { el, fmt, statusBadge, table } from "../dom.js";
import { poll } from "../poller.js";

export const POLL_MS = 5000;
const UNFINISHED = new Set(["queued", "running"]);

/** A fit's group in words as the API labels it ("linear head", "ntk", "all" without group_by). */
const groupName = (fit) => fit.group_label || Object.values(fit.group).map((v) => String(v)).join(", ") || "all";

/** A grid value as text: a string as it is, a list (a linked axis, widths) as its items. */
const gridText = (value) => (Array.isArray(value) ? value.map(gridText).join(", ") : String(value));

function legend(fit) {
  const interval = fit.slope_low === null ? "" : ` [${fmt(fit.slope_low)}, ${fmt(fit.slope_high)}]`;
  const theory = fit.theory_slope === null || fit.theory_slope === undefined ? "" : `; theory slope ${fmt(fit.theory_slope)} (dashed)`;
  const runs = Math.max(0, ...fit.points.map((p) => p.runs));
  const bars = runs > 1 ? `; bars: mean ± std over ${runs} runs` : "";
  return `${groupName(fit)}: slope ${fmt(fit.slope)}${interval}, R² ${fmt(fit.r_squared)}${theory}${bars}`;
}

/** The warnings of a chart's fits, each under its group: [] or [list]. */
function fitWarnings(fits) {
  const items = fits.flatMap((fit) => fit.warnings.map((w) => el("li", { class: "warning", dataset: { code: w.code, group: groupName(fit) } },
    `${groupName(fit)}: `, el("code", {}, w.code), `: ${w.message}`)));
  return items.length ? [el("ul", { class: "fit-warnings" }, items)] : [];
}

/** One log–log figure per (y, x) pair, the width of the page, with its fits' warnings under it. */
function drawFits(container, sweep) {
  const byAxes = new Map();
  for (const fit of sweep.fits) {
    const key = `${fit.y} vs ${fit.x}`;
    byAxes.set(key, [...(byAxes.get(key) || []), fit]);
  }
  for (const [key, fits] of byAxes) {
    const [first] = fits;
    const x = first.x_label || first.x;
    const y = first.y_label || first.y;
    let figure = container.querySelector(`[data-fit="${CSS.escape(key)}"]`);
    if (!figure) container.append((figure = chartFigure({ dataset: { fit: key } }, `${y} against ${x} (log–log)`, { tall: true })));
    fitChart(figure, {
      xName: x, yName: y,
      groups: fits.map((fit) => ({ ...fit, name: groupName(fit), legend: legend(fit), theory: fit.theory_slope ?? undefined })),
    });
    figure.querySelector(".fit-warnings")?.remove();
    figure.append(...fitWarnings(fits));
  }
}

function fitTable(sweep) {
  const rows = sweep.fits.map((fit) => el("tr", {},
    el("td", {}, fit.y), el("td", {}, fit.x), el("td", {}, groupName(fit)),
    el("td", { class: "num fit-slope", dataset: { y: fit.y, group: groupName(fit) } }, fmt(fit.slope)),
    el("td", { class: "num" }, fit.slope_low === null ? "—" : `${fmt(fit.slope_low)} … ${fmt(fit.slope_high)}`),
    el("td", { class: "num" }, fmt(fit.r_squared)), el("td", { class: "num" }, fit.points.length),
    el("td", { class: "num fit-theory", dataset: { y: fit.y, group: groupName(fit) } }, fmt(fit.theory_slope ?? null)),
    el("td", {}, fit.verdict)));
  return table(["y", "x", "group", "slope", "95% interval", "R²", "points", "theory", "verdict"], rows, { id: "fits" });
}

/** The grid as submitted: each axis and the values it takes, as text. */
function gridFacts(sweep) {
  return el("dl", { class: "facts", id: "grid" }, Object.entries(sweep.spec.grid).flatMap(([axis, values]) => [
    el("dt", {}, axis), el("dd", { dataset: { axis } }, values.map(gridText).join("; "))]));
}

function jobsTable(sweep) {
  const paths = Object.keys(sweep.table[0]?.values || {});
  const ys = [...new Set(sweep.fits.map((fit) => fit.y))];
  const rows = sweep.table.map((row) => el("tr", {},
    el("td", {}, el("a", { href: `#/jobs/${encodeURIComponent(row.job_id)}` }, row.job_id)), el("td", {}, statusBadge(row.status)),
    paths.map((path) => el("td", { dataset: { path } }, gridText(row.values[path]))),
    ys.map((y) => el("td", { class: "num" }, fmt(row.summary[y] ?? null)))));
  return table(["job", "status", ...paths, ...ys], rows, { id: "sweep-jobs" });
}

function progressLine(sweep) {
  const done = (sweep.counts.succeeded || 0) + (sweep.counts.failed || 0) + (sweep.counts.cancelled || 0);
  const counts = Object.entries(sweep.counts).filter(([, n]) => n).map(([status, n]) => `${n} ${status}`).join(", ");
  return el("p", {}, statusBadge(sweep.status), " ", el("progress", { value: done, max: sweep.total, "aria-label": "jobs finished" }),
    ` ${done} / ${sweep.total} finished (${counts})`);
}

export async function render(root, { args: [id], params, onLeave }) {
  const head = el("div");
  const charts = el("div", { class: "figures", id: "fit-charts" });
  const fits = el("div");
  const jobs = el("div");
  async function refresh() {
    const sweep = await getJson(`/v1/sweeps/${encodeURIComponent(id)}${query({ limit: 200, after: params.get("after") })}`);
    head.replaceChildren(el("h1", {}, sweep.name || sweep.id), progressLine(sweep), el("p", { class: "toolbar" },
      el("a", { href: `#/compare${query({ sweep: sweep.id, series: "delta_k" })}` }, "Overlay its ΔK(t) curves"),
      sweep.tags.map((tag) => el("a", { class: "tag", href: `#/jobs${query({ tag })}` }, tag)),
      sweep.next ? el("a", { href: `#/sweeps/${encodeURIComponent(id)}${query({ after: sweep.next })}` }, "Next rows") : ""),
    el("h2", {}, "Grid"), gridFacts(sweep));
    drawFits(charts, sweep);
    fits.replaceChildren(el("h2", {}, "Fits"), fitTable(sweep));
    jobs.replaceChildren(el("h2", {}, "Jobs"), jobsTable(sweep));
    return UNFINISHED.has(sweep.status);
  }
  root.append(head, charts, fits, jobs);
  if (await refresh()) onLeave(poll(refresh, POLL_MS, { wait: true }));
}

// Sweeps & presets: one page of GET /v1/sweeps (filters status and tag, cursor paging; re-read while a sweep on it
// is unfinished), opening a sweep by id, and the paper's presets with their theory slopes and a launch form.

import { getJson, query, send } from "../api.js";
import { el, fmt, statusBadge, table } from "../dom.js";
import { fillPager, filterForm } from "../listing.js";
import { poll } from "../poller.js";

export const POLL_MS = 5000;
const STATUSES = ["queued", "running", "succeeded", "failed", "cancelled", "partial"];
const UNFINISHED = new Set(["queued", "running"]);

function progressCell(sweep) {
  const done = (sweep.counts.succeeded || 0) + (sweep.counts.failed || 0) + (sweep.counts.cancelled || 0);
  return [el("progress", { value: done, max: sweep.total, "aria-label": `jobs of ${sweep.name || sweep.id} finished` }),
    ` ${done} / ${sweep.total}`];
}

function sweepRow(sweep) {
  const counts = Object.entries(sweep.counts).filter(([, n]) => n).map(([status, n]) => `${n} ${status}`).join(", ");
  return el("tr", { dataset: { sweepId: sweep.id } },
    el("td", {}, el("a", { href: `#/sweeps/${encodeURIComponent(sweep.id)}` }, sweep.name || sweep.id)),
    el("td", {}, statusBadge(sweep.status)), el("td", {}, progressCell(sweep)), el("td", {}, counts),
    el("td", {}, sweep.axes.join("; ")),
    el("td", {}, sweep.tags.map((tag) => el("a", { class: "tag", href: `#/sweeps${query({ tag })}` }, tag))),
    el("td", {}, new Date(sweep.created_at).toLocaleString()));
}

/** The list of sweeps; re-read every POLL_MS while one on the page is queued or running. */
function sweepList(params, onLeave) {
  const body = el("tbody");
  const pager = el("p", { class: "toolbar" });
  const filter = { status: params.get("status"), tag: params.get("tag") };
  const section = el("section", {}, el("h2", {}, "Sweeps"), filterForm("#/sweeps", STATUSES, params),
    el("table", { id: "sweeps" }, el("thead", {}, el("tr", {},
      ["sweep", "status", "jobs finished", "counts", "grid axes", "tags", "created"].map((c) => el("th", { scope: "col" }, c)))), body),
    pager);
  async function refresh() {
    const page = await getJson(`/v1/sweeps${query({ ...filter, after: params.get("after"), limit: 20 })}`);
    body.replaceChildren(...page.data.map(sweepRow));
    fillPager(pager, "#/sweeps", filter, params, page, "No sweeps.");
    return page.data.some((sweep) => UNFINISHED.has(sweep.status));
  }
  onLeave(poll(refresh, POLL_MS));
  return section;
}

function openForm() {
  const id = el("input", { name: "sweep", size: 28, placeholder: "swp_…", required: true });
  const form = el("form", { class: "filters" }, el("label", {}, "sweep id", id), el("button", { type: "submit" }, "Open"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/sweeps/${encodeURIComponent(id.value.trim())}`;
  });
  return form;
}

function launchForm(preset) {
  const scale = el("select", { name: "scale", "aria-label": `scale for ${preset.name}` },
    preset.scales.map((s) => el("option", { value: s, selected: s === "smoke" }, `${s} (${preset.jobs[s]} jobs)`)));
  const button = el("button", { type: "submit" }, "Launch");
  const form = el("form", { class: "launch", dataset: { preset: preset.name } }, scale, " ", button);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    try {
      const sweep = await send("POST", `/v1/presets/${encodeURIComponent(preset.name)}`, { scale: scale.value });
      location.hash = `#/sweeps/${encodeURIComponent(sweep.id)}`;
    } catch (error) {
      window.alert(error.message);
      button.disabled = false;
    }
  });
  return form;
}

/** "delta_k_max: linear head −0.5, swish head 0" per fitted quantity the theory predicts a slope for. */
function theoryCell(theory) {
  return Object.entries(theory || {}).map(([y, slopes]) => el("div", { class: "theory", dataset: { y } },
    `${y}: ${Object.entries(slopes).map(([group, slope]) => `${group} ${fmt(slope)}`).join(", ")}`));
}

export async function render(root, { params, onLeave }) {
  const presets = await getJson("/v1/presets");
  const rows = presets.data.map((preset) => el("tr", { dataset: { preset: preset.name } },
    el("td", {}, preset.name), el("td", {}, preset.title), el("td", {}, preset.claim), el("td", {}, theoryCell(preset.theory)),
    el("td", {}, launchForm(preset))));
  root.append(el("h1", {}, "Sweeps & presets"), sweepList(params, onLeave),
    el("h2", {}, "Open a sweep by id"), openForm(),
    el("h2", {}, "Presets (the paper's experiments)"),
    table(["preset", "experiment", "claim", "theory slopes", "launch at scale"], rows, { id: "presets" }));
}

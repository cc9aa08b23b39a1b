// Jobs: one page of GET /v1/jobs (filters status and tag, cursor paging), re-read every few seconds while visible.
// A list page leaves the specs out, so each job's model is read once (GET /v1/jobs/{id}) the first time it is listed.

import { getJson, query, send } from "../api.js";
import { duration, el, fmt, statusBadge } from "../dom.js";
import { fillPager, filterForm } from "../listing.js";
import { shortModel, uploadName } from "../model.js";
import { poll } from "../poller.js";

export const POLL_MS = 5000;
const STATUSES = ["queued", "running", "succeeded", "failed", "cancelled"];
const COLUMNS = ["", "name", "model", "status", "progress", "device", "tags", "ΔK max", "‖H‖ init → final", "final loss", "created", "actions"];
const FINISHED = new Set(["succeeded", "failed", "cancelled"]);
const models = new Map();  // job id → its model in words: a job's spec never changes

/** Read the models of the jobs not seen yet (in parallel); a job that cannot be read is left out and tried again. */
async function readModels(jobs) {
  await Promise.all(jobs.filter((job) => !models.has(job.id)).map(async (job) => {
    try {
      const { model } = (await getJson(`/v1/jobs/${encodeURIComponent(job.id)}`)).spec;
      models.set(job.id, shortModel(model, model.kind === "onnx" ? await uploadName(model.id) : undefined));
    } catch {
      // deleted since the page was read: its row goes at the next refresh
    }
  }));
}

function progressText(job) {
  const p = job.progress;
  if (!p || job.status !== "running") return job.status === "succeeded" && job.summary ? `${fmt(job.summary.steps)} steps` : "";
  const eta = p.eta_s === null || p.eta_s === undefined ? "" : `, ETA ${duration(p.eta_s)}`;
  return `${p.step ?? 0} / ${p.total ?? "?"} (${p.phase ?? "…"}${eta})`;
}

/** The data cells of a job's row, in COLUMNS order (without the check box and the actions). */
function dataCells(job) {
  const s = job.summary || {};
  return [
    [el("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.name || job.id)],
    [models.get(job.id) ?? "—"],
    [statusBadge(job.status)],
    [progressText(job)],
    [job.device ?? "—"],
    job.tags.map((tag) => el("a", { class: "tag", href: `#/jobs${query({ tag })}` }, tag)),
    [fmt(s.delta_k_max)],
    [s.hessian_norm_init == null && s.hessian_norm_final == null ? "—" : `${fmt(s.hessian_norm_init)} → ${fmt(s.hessian_norm_final)}`],
    [fmt(s.final_loss)],
    [new Date(job.created_at).toLocaleString()],
  ];
}

async function act(job, action, refresh) {
  const question = action === "cancel" ? `Cancel job “${job.name || job.id}”?` : `Delete job “${job.name || job.id}” and all its results?`;
  if (!window.confirm(question)) return;
  try {
    if (action === "cancel") await send("POST", `/v1/jobs/${encodeURIComponent(job.id)}/cancel`);
    else await send("DELETE", `/v1/jobs/${encodeURIComponent(job.id)}`);
  } catch (error) {
    window.alert(error.message);
  }
  await refresh();
}

function newRow(job, refresh) {
  const row = el("tr", { dataset: { jobId: job.id } });
  const cancel = el("button", { type: "button", class: "cancel" }, "Cancel");
  const remove = el("button", { type: "button", class: "delete" }, "Delete");
  cancel.addEventListener("click", () => act(row.job, "cancel", refresh));
  remove.addEventListener("click", () => act(row.job, "delete", refresh));
  const pick = el("input", { type: "checkbox", class: "pick", "aria-label": `select ${job.name || job.id} to compare` });
  row.append(el("td", {}, pick), ...dataCells(job).map(() => el("td")), el("td", {}, cancel, " ", remove));
  return row;
}

const NUMERIC = new Set([6, 7, 8]);  // indices in dataCells: ΔK max, ‖H‖, final loss

/**
 * Fill a row in place: a cell is replaced only when what it shows changed, and the check box and buttons stay,
 * so keyboard focus on a row's link, check box or button survives a refresh.
 */
function fillRow(row, job) {
  row.job = job;
  dataCells(job).forEach((content, i) => {
    const cell = row.children[i + 1];
    const fresh = el("td", { class: NUMERIC.has(i) ? "num" : null }, content);
    if (!fresh.isEqualNode(cell)) cell.replaceWith(fresh);
  });
  row.querySelector("button.cancel").disabled = FINISHED.has(job.status);
  row.querySelector("button.delete").disabled = !FINISHED.has(job.status);
}

export async function render(root, { params, onLeave }) {
  const body = el("tbody");
  const rows = new Map();
  const pager = el("p", { class: "toolbar" });
  const compare = el("button", { type: "button" }, "Compare selected");
  compare.addEventListener("click", () => {
    const ids = [...body.querySelectorAll("input.pick:checked")].map((box) => box.closest("tr").dataset.jobId);
    location.hash = `#/compare${query({ jobs: ids.join(",") })}`;
  });
  const filter = { status: params.get("status"), tag: params.get("tag") };
  root.append(el("h1", {}, "Jobs"), filterForm("#/jobs", STATUSES, params),
    el("table", { id: "jobs" }, el("thead", {}, el("tr", {}, COLUMNS.map((c) => el("th", { scope: "col" }, c)))), body),
    pager, el("p", {}, compare));

  async function refresh() {
    const page = await getJson(`/v1/jobs${query({ ...filter, after: params.get("after"), limit: 20 })}`);
    await readModels(page.data);
    const seen = new Set(page.data.map((job) => job.id));
    for (const [id, row] of rows) {
      if (seen.has(id)) continue;
      row.remove();
      rows.delete(id);
    }
    page.data.forEach((job, index) => {
      const row = rows.get(job.id) || newRow(job, refresh);
      rows.set(job.id, row);
      fillRow(row, job);
      if (body.children[index] !== row) body.insertBefore(row, body.children[index] || null);
    });
    fillPager(pager, "#/jobs", filter, params, page, "No jobs.");
  }
  onLeave(poll(refresh, POLL_MS));
}

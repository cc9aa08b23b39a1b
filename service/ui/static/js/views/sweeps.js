// Sweeps & presets: the paper's presets with a launch form (POST /v1/presets/{name}) and opening a sweep by id.

import { getJson, send } from "../api.js";
import { el, table } from "../dom.js";

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

function openForm() {
  const id = el("input", { name: "sweep", size: 28, placeholder: "swp_…", required: true });
  const form = el("form", { class: "filters" }, el("label", {}, "sweep id", id), el("button", { type: "submit" }, "Open"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/sweeps/${encodeURIComponent(id.value.trim())}`;
  });
  return form;
}

export async function render(root) {
  const presets = await getJson("/v1/presets");
  const rows = presets.data.map((preset) => el("tr", {},
    el("td", {}, preset.name), el("td", {}, preset.title), el("td", {}, preset.claim), el("td", {}, launchForm(preset))));
  root.append(el("h1", {}, "Sweeps & presets"), el("h2", {}, "Open a sweep"), openForm(),
    el("p", { class: "muted" }, "A sweep's jobs link to it from the Jobs table (filter by the sweep's tag) and from each job's page."),
    el("h2", {}, "Presets (the paper's experiments)"), table(["preset", "experiment", "claim", "launch at scale"], rows, { id: "presets" }));
}

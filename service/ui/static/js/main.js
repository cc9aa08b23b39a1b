// The dashboard's entry point: a hash router (#/jobs, #/jobs/<id>, #/compare, #/sweeps, #/sweeps/<id>).

import { forgetKey, hasKey } from "./api.js";
import { disposeCharts } from "./charts.js";
import { showError } from "./dom.js";
import * as compare from "./views/compare.js";
import * as job from "./views/job.js";
import * as jobs from "./views/jobs.js";
import * as sweep from "./views/sweep.js";
import * as sweeps from "./views/sweeps.js";

const ROUTES = [
  [/^#\/jobs\/([^/?]+)$/, job],
  [/^#\/jobs$/, jobs],
  [/^#\/compare$/, compare],
  [/^#\/sweeps\/([^/?]+)$/, sweep],
  [/^#\/sweeps$/, sweeps],
];

let leaving = [];

/** The view module for a hash, its path arguments and its query parameters. */
function route(hash) {
  const [path, search = ""] = hash.split("?");
  for (const [pattern, view] of ROUTES) {
    const match = pattern.exec(path);
    if (match) return { view, args: match.slice(1).map(decodeURIComponent), params: new URLSearchParams(search) };
  }
  return null;
}

async function show() {
  const root = document.getElementById("main");
  leaving.forEach((stop) => stop());
  leaving = [];
  disposeCharts(root);
  const target = route(location.hash || "#/jobs");
  if (!target) {
    location.hash = "#/jobs";
    return;
  }
  root.replaceChildren();
  document.querySelectorAll("header nav a").forEach((link) => {
    const current = (location.hash || "#/jobs").startsWith(link.getAttribute("href"));
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  });
  try {
    await target.view.render(root, { args: target.args, params: target.params, onLeave: (stop) => leaving.push(stop) });
  } catch (error) {
    showError(root, error);
  }
  document.getElementById("forget-key").hidden = !hasKey();
}

document.getElementById("forget-key").addEventListener("click", () => {
  forgetKey();
  location.reload();
});
window.addEventListener("hashchange", show);
show();

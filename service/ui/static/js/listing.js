// What the Jobs and Sweeps lists share: a status / tag filter form and the cursor pager over the API's pages.

import { query } from "./api.js";
import { el } from "./dom.js";

/** The filter form of the list at `route` (#/jobs, #/sweeps): submitting it opens the first filtered page. */
export function filterForm(route, statuses, params) {
  const status = el("select", { name: "status" }, el("option", { value: "" }, "any"),
    statuses.map((s) => el("option", { value: s, selected: params.get("status") === s }, s)));
  const tag = el("input", { name: "tag", value: params.get("tag") || "", size: 16 });
  const form = el("form", { class: "filters", role: "search" },
    el("label", {}, "status", status), el("label", {}, "tag", tag), el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `${route}${query({ status: status.value, tag: tag.value.trim() })}`;
  });
  return form;
}

/**
 * Fill `pager` with "First page" (when not on it) and "Next page" (the API's `next` cursor as `after`) for a page of
 * the list at `route` under `filter`; `empty` when the page has no rows. Untouched when nothing changed, so keyboard
 * focus on a link survives a refresh.
 */
export function fillPager(pager, route, filter, params, page, empty) {
  const signature = `${params.get("after")}|${page.next}|${page.data.length}`;
  if (pager.dataset.signature === signature) return;
  pager.dataset.signature = signature;
  const first = params.get("after") ? el("a", { href: `${route}${query(filter)}` }, "First page") : "";
  const next = page.next ? el("a", { href: `${route}${query({ ...filter, after: page.next })}`, rel: "next" }, "Next page") : "";
  pager.replaceChildren(page.data.length ? "" : el("span", { class: "muted" }, empty), first, " ", next);
}

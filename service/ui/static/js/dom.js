// Build DOM from data without ever parsing it as HTML: every string becomes a text node.

/** el("td", {class: "num", dataset: {id}}, "text", child) → an element; attributes via setAttribute, text via text nodes. */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "dataset") Object.assign(node.dataset, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** A table with a header row of `columns` and one row per item of `rows` (each an array of cells). */
export function table(columns, rows, attributes = {}) {
  return el("table", attributes,
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { scope: "col" }, c)))),
    el("tbody", {}, rows));
}

/** A number for a table cell: 4 significant digits, exponent form for tiny or huge values; "—" for null. */
export function fmt(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value !== "number") return String(value);
  if (value === 0) return "0";
  const size = Math.abs(value);
  return size >= 1e-3 && size < 1e5 ? String(Number(value.toPrecision(4))) : value.toExponential(2);
}

/** Seconds as "1 h 02 min", "3 min 05 s" or "12 s". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.round(seconds);
  if (s >= 3600) return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
  if (s >= 60) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  return `${s} s`;
}

export function statusBadge(status) {
  return el("span", { class: `status status-${status}`, dataset: { status } }, status);
}

export function showError(container, error) {
  container.replaceChildren(el("p", { class: "error", role: "alert" }, error.message || String(error)));
}

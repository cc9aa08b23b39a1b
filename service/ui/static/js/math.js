// Labels with math, written as in TeX: "‖K(w_t) − K(w₀)‖_F", "λ_min", "‖∂f/∂α^(l)‖_∞". A "_" or "^" after a
// symbol or a one-letter name takes the braced group, the parenthesised group or the run of letters, digits and ∞
// after it as a sub- or superscript: on the page as <sub>/<sup>, on a chart's canvas as ECharts rich text. In an
// identifier (delta_k_max, model.output_activation) the "_" follows a longer name and stays as it is.

import { el } from "./dom.js";

const SCRIPT = /(?<![\p{L}\p{N}_][\p{L}\p{N}])([_^])(\{[^}]*\}|\([^)]*\)|[\p{L}\p{N}∞]+)/gu;

/** The label cut into [text, "" | "sub" | "sup"] parts. */
export function mathParts(label) {
  const parts = [];
  let at = 0;
  for (const match of label.matchAll(SCRIPT)) {
    if (match.index > at) parts.push([label.slice(at, match.index), ""]);
    parts.push([match[2].replace(/^\{(.*)\}$/, "$1"), match[1] === "_" ? "sub" : "sup"]);
    at = match.index + match[0].length;
  }
  if (at < label.length) parts.push([label.slice(at), ""]);
  return parts;
}

/** The label as a <span class="math"> of text with <sub> and <sup>. */
export function math(label) {
  return el("span", { class: "math" }, mathParts(label).map(([text, kind]) => (kind ? el(kind, {}, text) : text)));
}

/** The label as ECharts rich text over richScripts(): {sub|…} and {sup|…} around the scripts. */
export function richMath(label) {
  return mathParts(label).map(([text, kind]) => (kind ? `{${kind}|${text}}` : `{base|${text}}`)).join("");
}

/** Rich-text styles for richMath at a base font size. */
export function richScripts(size) {
  const script = Math.round(size * 0.72);
  return {
    base: { fontSize: size, lineHeight: size * 1.7, verticalAlign: "middle" },
    sub: { fontSize: script, lineHeight: size * 1.7, verticalAlign: "bottom", padding: [0, 0, 2, 0] },
    sup: { fontSize: script, lineHeight: size * 1.7, verticalAlign: "top", padding: [2, 0, 0, 0] },
  };
}

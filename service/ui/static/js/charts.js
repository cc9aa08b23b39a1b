// Charts drawn by ECharts (vendored, static/vendor/echarts): line series, heatmaps, spectra and log–log fits.
// Each chart sits in a figure (chartFigure): a caption with its math, the canvas, and a legend in the page's
// text, so captions and legends wrap with the page and render sub- and superscripts. The figure records how many
// points it shows in data-points and the kind of its y axis ("log" or "value") in data-y-axis.

import * as echarts from "../vendor/echarts/echarts.esm.min.js";
import { el } from "./dom.js";
import { math, richMath, richScripts } from "./math.js";

/** Tableau 10: distinct on white, one colour per series or fitted group. */
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const colour = (i) => PALETTE[i % PALETTE.length];

const charts = new Set();
window.addEventListener("resize", () => charts.forEach((chart) => chart.resize()));

function chartIn(figure) {
  const container = figure.querySelector(".chart");
  let chart = echarts.getInstanceByDom(container);
  if (!chart) {
    chart = echarts.init(container, null, { renderer: "canvas" });
    charts.add(chart);
  }
  return chart;
}

/** Dispose of every chart inside `root` (a view being left). */
export function disposeCharts(root) {
  for (const chart of [...charts]) {
    if (root.contains(chart.getDom())) {
      charts.delete(chart);
      chart.dispose();
    }
  }
}

/** A figure for one chart: `caption` (a math label) over the canvas box and an empty legend; `attributes` on the figure. */
export function chartFigure(attributes, caption, { tall = false } = {}) {
  const title = el("figcaption", {}, math(caption));
  return el("figure", { class: "figure", ...attributes }, title,
    el("div", { class: tall ? "chart tall" : "chart", role: "img", "aria-label": title.textContent }), el("ul", { class: "legend" }));
}

/** The figure's legend: per entry a swatch in its colour and its text (a node or a string). */
function fillLegend(figure, entries) {
  figure.querySelector("ul.legend").replaceChildren(...entries.map(({ color, text, dataset }) => {
    const swatch = el("span", { class: "swatch", "aria-hidden": "true" });
    swatch.style.borderColor = color;
    return el("li", { dataset }, swatch, text);
  }));
}

/** [x, y] pairs that a log axis can show: finite, and positive on each log axis. */
function plottable(xs, ys, logX, logY) {
  const pairs = [];
  for (let i = 0; i < xs.length; i += 1) {
    const x = xs[i];
    const y = ys[i];
    if (y === null || !Number.isFinite(y) || !Number.isFinite(x)) continue;
    if ((logX && x <= 0) || (logY && y <= 0)) continue;
    pairs.push([x, y]);
  }
  return pairs;
}

function axis(name, log) {
  return { type: log ? "log" : "value", name: name ? richMath(name) : "", nameLocation: "middle", nameGap: 34, scale: !log,
           nameTextStyle: { rich: richScripts(13) },
           axisLabel: { formatter: (v) => (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-2) ? v.toExponential(0) : v) } };
}

function base(figure, xName, yName, logX, logY) {
  figure.dataset.yAxis = logY ? "log" : "value";
  return {
    animation: false,
    color: PALETTE,
    tooltip: { trigger: "axis" },
    grid: { left: 72, right: 24, top: 16, bottom: 48 },
    xAxis: axis(xName, logX),
    yAxis: axis(yName, logY),
  };
}

/**
 * Line chart of metric series: series = [{name, label, step: [...], value: [...]}] (label: a math label for the
 * legend; without one the legend shows the name as text); y on a log axis when logY (non-positive values are left out there).
 */
export function lineChart(figure, { series, logY = false, logX = false, xName = "step" }) {
  const lines = series.map((s) => {
    const data = plottable(s.step, s.value, logX, logY);
    return { name: s.name, type: "line", showSymbol: data.length <= 30, data };
  });
  chartIn(figure).setOption({ ...base(figure, xName, "", logX, logY), series: lines }, { notMerge: true });
  fillLegend(figure, series.map((s, i) => ({ color: colour(i), text: s.label ? math(s.label) : s.name, dataset: { series: s.name } })));
  figure.dataset.points = String(lines.reduce((total, line) => total + line.data.length, 0));
}

/** Block averages of a square matrix (n×n, row-major) down to at most `cells`×`cells`. */
function shrink(data, n, cells) {
  const block = Math.max(1, Math.ceil(n / cells));
  const size = Math.ceil(n / block);
  const sums = new Float64Array(size * size);
  const counts = new Float64Array(size * size);
  for (let i = 0; i < n; i += 1) {
    for (let j = 0; j < n; j += 1) {
      const k = Math.floor(i / block) * size + Math.floor(j / block);
      sums[k] += data[i * n + j];
      counts[k] += 1;
    }
  }
  return { size, block, values: sums.map((s, k) => s / counts[k]) };
}

/** Heatmap of an n×n kernel, block-averaged to at most 96×96 cells (the caption then says the block size). */
export function heatmap(figure, { data, n }) {
  const { size, block, values } = shrink(data, n, 96);
  const cells = [];
  let low = Infinity;
  let high = -Infinity;
  for (let i = 0; i < size; i += 1) {
    for (let j = 0; j < size; j += 1) {
      const v = values[i * size + j];
      low = Math.min(low, v);
      high = Math.max(high, v);
      cells.push([j, size - 1 - i, v]);
    }
  }
  if (block > 1) figure.querySelector("figcaption").append(` (${block}×${block} block means)`);
  const index = Array.from({ length: size }, (_, i) => i * block);
  chartIn(figure).setOption({
    animation: false,
    tooltip: { position: "top" },
    grid: { left: 48, right: 80, top: 16, bottom: 36 },
    xAxis: { type: "category", data: index, splitArea: { show: false } },
    yAxis: { type: "category", data: [...index].reverse() },
    visualMap: { min: low, max: high, calculable: true, orient: "vertical", right: 0, top: "middle",
                 inRange: { color: ["#313695", "#74add1", "#ffffbf", "#f46d43", "#a50026"] } },
    series: [{ type: "heatmap", data: cells, progressive: 0 }],
  }, { notMerge: true });
  figure.dataset.points = String(cells.length);
}

/** Eigenvalues (descending) of several kernels on a log y axis; non-positive ones are left out. */
export function spectrumChart(figure, { spectra }) {
  const series = spectra.map(({ name, values }) => ({
    name, type: "line", showSymbol: true, symbolSize: 4,
    data: plottable(values.map((_, i) => i + 1), values, false, true),
  }));
  chartIn(figure).setOption({ ...base(figure, "index", "eigenvalue", false, true), series }, { notMerge: true });
  fillLegend(figure, spectra.map(({ name }, i) => ({ color: colour(i), text: name })));
  figure.dataset.points = String(series.reduce((total, s) => total + s.data.length, 0));
}

/**
 * Vertical bars with caps from [x, low, high, open] data: y from low to high, or to the plot's bottom edge where
 * `open` (mean − std ≤ 0, which a log axis cannot show).
 */
function errorBars(name, color, data) {
  const stroke = { stroke: color, lineWidth: 1.5 };
  const renderItem = (params, api) => {
    const [x, top] = api.coord([api.value(0), api.value(2)]);
    const bottom = api.value(3) ? params.coordSys.y + params.coordSys.height : api.coord([api.value(0), api.value(1)])[1];
    const segments = [[x, top, x, bottom], [x - 5, top, x + 5, top]];
    if (!api.value(3)) segments.push([x - 5, bottom, x + 5, bottom]);
    return { type: "group", children: segments.map(([x1, y1, x2, y2]) => ({ type: "line", shape: { x1, y1, x2, y2 }, style: stroke })) };
  };
  return { name, type: "custom", data, encode: { x: 0, y: [1, 2] }, renderItem, silent: true, z: 1 };
}

/**
 * Log–log fit plot: per group (one colour) its mean points with mean ± std bars over the runs at each x, its fitted
 * line y = e^intercept·x^slope over the points' range and, where it has a `theory` slope, a dashed line with that
 * slope through its first point. The legend gives each group's `legend` text. Sets data-error-bars to the bars drawn.
 */
export function fitChart(figure, { xName, yName, groups }) {
  const series = [];
  let bars = 0;
  groups.forEach((group, i) => {
    const color = colour(i);
    const points = group.points.filter((p) => p.x > 0 && p.y_mean > 0);
    series.push({ name: group.name, type: "scatter", data: points.map((p) => [p.x, p.y_mean, p.y_std, p.runs]), symbolSize: 8,
                  itemStyle: { color }, z: 3 });
    const spread = points.filter((p) => p.runs > 1 && p.y_std > 0);
    bars += spread.length;
    if (spread.length) {
      series.push(errorBars(group.name, color, spread.map((p) => {
        const low = p.y_mean - p.y_std;
        return [p.x, low > 0 ? low : p.y_mean, p.y_mean + p.y_std, low > 0 ? 0 : 1];
      })));
    }
    if (group.slope !== null && group.intercept !== null && points.length) {
      const xs = points.map((p) => p.x);
      series.push({ name: group.name, type: "line", showSymbol: false, lineStyle: { color }, itemStyle: { color },
                    data: [Math.min(...xs), Math.max(...xs)].map((x) => [x, Math.exp(group.intercept) * x ** group.slope]) });
    }
    if (group.theory !== undefined && points.length) {
      const [{ x: x0, y_mean: y0 }] = points;
      const x1 = Math.max(...points.map((p) => p.x));
      series.push({ name: group.name, type: "line", showSymbol: false, lineStyle: { color, type: "dashed" }, itemStyle: { color },
                    data: [[x0, y0], [x1, y0 * (x1 / x0) ** group.theory]] });
    }
  });
  const option = base(figure, xName, yName, true, true);
  option.grid.left = 84;
  option.yAxis.nameGap = 52;
  option.tooltip = { trigger: "item", formatter: ({ seriesName, value }) => el("span", {},
    `${seriesName}: x = ${value[0]}, y = ${value[1].toPrecision(4)}`, value[3] > 1 ? ` ± ${value[2].toPrecision(2)} (${value[3]} runs)` : "") };
  chartIn(figure).setOption({ ...option, series }, { notMerge: true });
  fillLegend(figure, groups.map((group, i) => ({ color: colour(i), text: group.legend, dataset: { group: group.name } })));
  figure.dataset.points = String(series.filter((s) => s.type === "scatter").reduce((t, s) => t + s.data.length, 0));
  figure.dataset.errorBars = String(bars);
}

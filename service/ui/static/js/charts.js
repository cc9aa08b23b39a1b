// Charts drawn by ECharts (vendored, static/vendor/echarts): line series, heatmaps, spectra and log–log fits.
// Each chart records how many points it shows in its container's data-points attribute.

import * as echarts from "../vendor/echarts/echarts.esm.min.js";

const charts = new Set();
window.addEventListener("resize", () => charts.forEach((chart) => chart.resize()));

function chartIn(container) {
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
  return { type: log ? "log" : "value", name, nameLocation: "middle", nameGap: 28, scale: !log,
           axisLabel: { formatter: (v) => (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-2) ? v.toExponential(0) : v) } };
}

function base(title, xName, yName, logX, logY) {
  return {
    animation: false,
    title: { text: title, left: "center", textStyle: { fontSize: 13 } },
    tooltip: { trigger: "axis" },
    legend: { bottom: 0, type: "scroll" },
    grid: { left: 64, right: 24, top: 36, bottom: 64 },
    xAxis: axis(xName, logX),
    yAxis: axis(yName, logY),
  };
}

/**
 * Line chart of metric series: series = [{name, step: [...], value: [...]}]; y on a log axis when logY
 * (non-positive values are left out there). Sets data-points to the number of points drawn.
 */
export function lineChart(container, { title, series, logY = false, logX = false, xName = "step" }) {
  const lines = series.map((s) => {
    const data = plottable(s.step, s.value, logX, logY);
    return { name: s.name, type: "line", showSymbol: data.length <= 30, data };
  });
  chartIn(container).setOption({ ...base(title, xName, "", logX, logY), series: lines }, { notMerge: true });
  container.dataset.points = String(lines.reduce((total, line) => total + line.data.length, 0));
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

/** Heatmap of an n×n kernel, block-averaged to at most 96×96 cells (the title says the block size). */
export function heatmap(container, { title, data, n }) {
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
  const index = Array.from({ length: size }, (_, i) => i * block);
  chartIn(container).setOption({
    animation: false,
    title: { text: block > 1 ? `${title} (${block}×${block} block means)` : title, left: "center", textStyle: { fontSize: 13 } },
    tooltip: { position: "top" },
    grid: { left: 48, right: 80, top: 36, bottom: 36 },
    xAxis: { type: "category", data: index, splitArea: { show: false } },
    yAxis: { type: "category", data: [...index].reverse() },
    visualMap: { min: low, max: high, calculable: true, orient: "vertical", right: 0, top: "middle",
                 inRange: { color: ["#313695", "#74add1", "#ffffbf", "#f46d43", "#a50026"] } },
    series: [{ type: "heatmap", data: cells, progressive: 0 }],
  }, { notMerge: true });
  container.dataset.points = String(cells.length);
}

/** Eigenvalues (descending) of several kernels on a log y axis; non-positive ones are left out. */
export function spectrumChart(container, { title, spectra }) {
  const series = spectra.map(({ name, values }) => ({
    name, type: "line", showSymbol: true, symbolSize: 4,
    data: plottable(values.map((_, i) => i + 1), values, false, true),
  }));
  chartIn(container).setOption({ ...base(title, "index", "eigenvalue", false, true), series }, { notMerge: true });
  container.dataset.points = String(series.reduce((total, s) => total + s.data.length, 0));
}

/**
 * Log–log fit plot: per group its mean points and the fitted line y = e^intercept·x^slope over the points' range,
 * named `label` (the caller puts slope, 95% interval and R² in it); where a group has a `theory` slope, a dashed
 * line named `theoryLabel` with that slope through the group's first point.
 */
export function fitChart(container, { title, xName, yName, groups }) {
  const series = [];
  for (const group of groups) {
    const points = plottable(group.points.map((p) => p.x), group.points.map((p) => p.y_mean), true, true);
    series.push({ name: group.label, type: "scatter", data: points, symbolSize: 8 });
    if (group.slope !== null && group.intercept !== null && points.length) {
      const xs = points.map((p) => p[0]);
      const ends = [Math.min(...xs), Math.max(...xs)];
      series.push({ name: group.label, type: "line", showSymbol: false,
                    data: ends.map((x) => [x, Math.exp(group.intercept) * x ** group.slope]) });
    }
    if (group.theory !== undefined && points.length) {
      const [x0, y0] = points[0];
      const x1 = Math.max(...points.map((p) => p[0]));
      series.push({ name: group.theoryLabel, type: "line", showSymbol: false, lineStyle: { type: "dashed" },
                    data: [[x0, y0], [x1, y0 * (x1 / x0) ** group.theory]] });
    }
  }
  const option = base(title, xName, yName, true, true);
  option.tooltip = { trigger: "item" };
  chartIn(container).setOption({ ...option, series }, { notMerge: true });
  container.dataset.points = String(series.filter((s) => s.type === "scatter").reduce((t, s) => t + s.data.length, 0));
}

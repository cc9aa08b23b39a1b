// Which metric series each job chart shows, its caption and the series' legend labels (math labels, math.js), and
// whether its y axis is logarithmic (docs/diagnostics.md). A log axis leaves out non-positive values (ΔK(0) = 0).
// The names and charts come from api_schemas/series.py through the generated series_catalog.js.

import { JOB_CHARTS, SERIES_LABELS } from "./series_catalog.js";

export { JOB_CHARTS, SERIES_LABELS };

/** Series a compare view may overlay, with its axis. */
export const COMPARABLE = Object.fromEntries(JOB_CHARTS.flatMap((chart) => chart.names.map((name) => [name, chart.logY])));

"""static/js/series_catalog.js, the dashboard's copy of api_schemas/series.py, written from it.

    python -m ntklab.service.ui.series_catalog     # rewrite the file after changing api_schemas/series.py

The dashboard loads it as an ES module beside series.js: JOB_CHARTS ({title, names, logY, id}) and
SERIES_LABELS ({name: legend label}) in the shapes series.js exports, and SERIES ({name: definition}).
tests/ui/test_series_catalog.py fails while the file differs from what `render` writes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ntklab.api_schemas.series import JOB_CHARTS, SERIES

CATALOG = Path(__file__).parent / "static" / "js" / "series_catalog.js"
HEADER = "// Generated from api_schemas/series.py by `python -m ntklab.service.ui.series_catalog`: do not edit.\n"


def render() -> str:
    """The module's text: three `export const` lines of JSON, after HEADER."""
    charts = [
        {"title": chart.title, "names": list(chart.legends), "logY": chart.log_y}
        | ({"id": chart.id} if chart.id else {})
        for chart in JOB_CHARTS
    ]
    labels = {name: label for chart in JOB_CHARTS for name, label in chart.legends.items()}
    exports = {"SERIES": SERIES, "JOB_CHARTS": charts, "SERIES_LABELS": labels}
    return HEADER + "".join(
        f"export const {name} = {json.dumps(value, ensure_ascii=False, indent=2)};\n" for name, value in exports.items()
    )


if __name__ == "__main__":
    CATALOG.write_text(render(), encoding="utf-8")

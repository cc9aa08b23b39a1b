"""The series names have one source, api_schemas/series.py: the dashboard's generated catalog is up to date
with it, and the SDK's figure, the analysis labels and the dashboard's charts name only series it lists."""

from __future__ import annotations

from ntklab.analysis.labels import SERIES_LABELS
from ntklab.api_schemas.series import JOB_CHARTS, JOB_FIGURE, SERIES
from ntklab.plots import JOB_SERIES
from ntklab.resources.jobs import PLOTTED_SERIES
from ntklab.service.ui.series_catalog import CATALOG, render


def test_the_dashboards_catalog_is_generated_from_api_schemas():
    assert CATALOG.read_text(encoding="utf-8") == render(), "run `python -m ntklab.service.ui.series_catalog`"


def test_every_series_name_used_is_a_declared_series():
    charted = {name for chart in JOB_CHARTS for name in chart.legends}
    assert charted | set(JOB_FIGURE) | set(SERIES_LABELS) <= set(SERIES)


def test_the_sdk_fetches_and_draws_the_job_figures_series():
    assert PLOTTED_SERIES == JOB_FIGURE and set(JOB_SERIES) == set(JOB_FIGURE)

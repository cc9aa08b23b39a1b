"""The client's resources: jobs, sweeps and presets, each in a sync and an async flavour."""

from api_schemas.sweeps import SweepRow
from ntklab.resources.jobs import ArtifactInfo, AsyncJobs, Job, Jobs, MetricSeries
from ntklab.resources.presets import AsyncPresets, Preset, Presets
from ntklab.resources.sweeps import AsyncSweeps, Sweep, Sweeps

__all__ = [
    "ArtifactInfo",
    "AsyncJobs",
    "AsyncPresets",
    "AsyncSweeps",
    "Job",
    "Jobs",
    "MetricSeries",
    "Preset",
    "Presets",
    "Sweep",
    "SweepRow",
    "Sweeps",
]

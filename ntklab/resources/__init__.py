"""The client's resources: jobs, sweeps, presets, data sets and models, each in a sync and an async flavour."""

from ntklab.api_schemas.resources import ArtifactInfo
from ntklab.api_schemas.sweeps import SweepRow
from ntklab.resources.datasets import AsyncDatasets, Dataset, Datasets
from ntklab.resources.jobs import (
    AsyncJob,
    AsyncJobs,
    AsyncJobUpdate,
    Job,
    JobDryRun,
    Jobs,
    JobUpdate,
    MetricSeries,
)
from ntklab.resources.models import AsyncModels, Model, Models
from ntklab.resources.presets import AsyncPresets, Preset, Presets
from ntklab.resources.sweeps import AsyncSweeps, Sweep, Sweeps, SweepSummary

__all__ = [
    "ArtifactInfo",
    "AsyncDatasets",
    "AsyncJob",
    "AsyncJobUpdate",
    "AsyncJobs",
    "AsyncModels",
    "AsyncPresets",
    "AsyncSweeps",
    "Dataset",
    "Datasets",
    "Job",
    "JobDryRun",
    "JobUpdate",
    "Jobs",
    "MetricSeries",
    "Model",
    "Models",
    "Preset",
    "Presets",
    "Sweep",
    "SweepRow",
    "SweepSummary",
    "Sweeps",
]

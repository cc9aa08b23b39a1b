"""A job's estimate as the API shows it: on the job (GET /v1/jobs/{id}) and before it runs (POST /v1/jobs?dry_run=true).

Both show planner/estimate.py at this deployment's rates, those the time cap is checked at
(service/caps.py:time_rates), so a dry run answers the estimate the job then carries. The job's is computed
once, by the caps check at submission, and stored on its row (store/job_estimates.py); GET reads it back. Per phase φ

    seconds_φ = FLOPs_φ / (R / s_φ) + operations_φ · t_op,     seconds = Σ_φ seconds_φ

with R = estimate_flops_per_s, t_op = estimate_seconds_per_op and s_φ = 8 for the model Hessian's
memory-bound FLOPs (1 otherwise). R and t_op are the settings', and `rates.source` says whether they are
the shipped calibration or this deployment's own; the caps are checked at them.

A dry run also answers the estimate calibrated by measured throughput, per worker class (the jobs' device
before any index: "cpu", "cuda"). From each class's newest CALIBRATION_WINDOW succeeded jobs
(store/throughput.py), each job's estimate recomputed from its stored spec at the same rates (cached by
spec hash), per phase φ

    factor_φ = median over the jobs that ran φ of measured_φ / seconds_φ,     calibrated_φ = factor_φ · seconds_φ

measured_φ being the summary's timings of the phases in MEASURED[φ]. Training compares per step run,
(timings.training / summary.steps) / (seconds_training / max_steps), so a job that stopped early (target
loss, divergence) counts at its pace; a diverged job counts for training only (no endpoint at the end),
and one that stopped early not for the phases along the path (ALONG_PATH: their runs follow the steps
reached, the estimate counts them to max_steps). The Lanczos phases (UNCALIBRATED) stop at their
tolerance, after fewer HVPs than estimated, and no job records how many: their seconds stay at the rates.
"""

from __future__ import annotations

from statistics import median

from sqlalchemy.orm import Session

from ntklab.api_schemas.resources import (
    CalibratedPhase,
    EstimateCap,
    EstimatePhase,
    EstimateRates,
    JobDryRun,
    JobEstimate,
    WorkerClassEstimate,
)
from ntklab.api_schemas.spec import JobSpec
from ntklab.config.settings import Settings
from ntklab.planner.estimate import FLOPS_PER_S, SECONDS_PER_OP, Estimate, TimeRates, estimate_job
from ntklab.service.caps import CheckedSpec, time_rates
from ntklab.store.job_estimates import stored_estimate
from ntklab.store.throughput import FinishedRun, recent_runs

CALIBRATION_WINDOW = 50
"""Succeeded jobs per worker class the calibration reads, newest first."""
MEASURED = {
    "training": ("training",),
    "kernel": ("kernel",),
    "path": ("linearization",),
    "sensitivity": ("sensitivity",),
    "kernel_trace": ("warnings",),
    "infinite_width": ("infinite_width",),
    "constants": ("data", "build"),
}
"""Estimate term → the summary.timings phases measured for it (docs/diagnostics.md, "Timings"). path is the
linearization error's time (the weight change, a few operations a step, is charged to training)."""
ALONG_PATH = frozenset({"kernel", "path"})
UNCALIBRATED = {
    name: f"{what} stops at its tolerance after fewer HVPs than estimated, and no job records how many: "
    "not calibrated, at the rates"
    for name, what in (
        ("hessian", "The model Hessian's Lanczos"),
        ("hessian_spectrum", "The spectrum's Lanczos"),
        ("loss_hessian", "The loss-Hessian split's Lanczos"),
    )
}
NOT_RUN = "no recent job of this class ran it: at the rates"
_CACHE_SIZE = 4096
_time_terms_cache: dict[tuple[str, TimeRates], dict[str, float] | None] = {}

DEFAULT_RATES = (
    "the shipped calibration: bench/bench_time_estimate.py on one CPU core of the reference machine "
    '(docs/benchmarks.md, "Time estimate"), not measured on this deployment\'s workers; run that bench on a '
    "worker and set NTKLAB_ESTIMATE_FLOPS_PER_S and NTKLAB_ESTIMATE_SECONDS_PER_OP"
)
DEPLOYMENT_RATES = (
    "set by this deployment (settings estimate_flops_per_s and estimate_seconds_per_op, "
    "NTKLAB_ESTIMATE_FLOPS_PER_S and NTKLAB_ESTIMATE_SECONDS_PER_OP)"
)


def rates_used(rates: TimeRates) -> EstimateRates:
    """`rates` and their source: the shipped defaults, or this deployment's settings."""
    shipped = (rates.flops_per_s, rates.seconds_per_op) == (FLOPS_PER_S, SECONDS_PER_OP)
    return EstimateRates(
        flops_per_s=rates.flops_per_s,
        seconds_per_op=rates.seconds_per_op,
        source="default" if shipped else "settings",
        detail=DEFAULT_RATES if shipped else DEPLOYMENT_RATES,
    )


def job_estimate(stored: dict | None, spec: dict, settings: Settings) -> JobEstimate | None:
    """A job's estimate as GET shows it: the one stored at submission (at the rates of that moment); for a job stored
    before migration 0015 (or whose model cannot be planned) the spec's, at this deployment's rates; None if none."""
    if stored is not None:
        return _resource(JobEstimate, stored_estimate(stored))
    try:
        return _resource(JobEstimate, estimate_job(JobSpec.model_validate(spec), time_rates(settings)))
    except ValueError:  # pydantic's ValidationError is one
        return None


def dry_run(spec: JobSpec, checked: CheckedSpec, settings: Settings, session: Session) -> JobDryRun:
    """The estimate of a spec that passed the caps (service/caps.py:checked_spec), with those caps, and the
    same estimate calibrated per worker class from its recent succeeded jobs."""
    rates = time_rates(settings)
    estimate = checked.estimate or estimate_job(spec, rates)  # raises ValueError (naming the field) if unplannable
    caps = [
        EstimateCap(setting="max_job_memory_bytes", limit=settings.max_job_memory_bytes, value=estimate.memory_bytes),
        EstimateCap(setting="max_job_flops", limit=settings.max_job_flops, value=estimate.flops),
        EstimateCap(setting="max_job_seconds", limit=settings.max_job_seconds, value=estimate.seconds),
    ]
    runs = recent_runs(session, CALIBRATION_WINDOW)
    by_class = {name: calibrated(estimate, name, jobs, rates) for name, jobs in runs.items()}
    note = (
        f"each worker class's newest {CALIBRATION_WINDOW} succeeded jobs at most: per phase the median of measured / "
        "estimated seconds (training per step run); the caps are checked at `rates`"
        if by_class
        else "no succeeded job yet: no worker class has a measured throughput, every estimate is at `rates`"
    )
    return _resource(
        JobDryRun, estimate, parameters=checked.parameters, caps=caps, by_worker_class=by_class, calibration=note
    )


def calibrated(estimate: Estimate, worker_class: str, jobs: list[FinishedRun], rates: TimeRates) -> WorkerClassEstimate:
    """`estimate` with each phase scaled by the median ratio of measured to estimated seconds over `jobs` (module docstring)."""
    ratios = phase_ratios(jobs, rates)
    phases = []
    for term in estimate.time:
        found = ratios.get(term.name, [])
        factor = median(found) if found and term.name not in UNCALIBRATED else None
        note = UNCALIBRATED.get(term.name) or (None if found else NOT_RUN)
        phases.append(
            CalibratedPhase(
                name=term.name,
                seconds=term.value if factor is None else factor * term.value,
                factor=factor,
                jobs=len(found) if factor is not None else 0,
                note=note,
            )
        )
    phases.sort(key=lambda phase: -phase.seconds)
    return WorkerClassEstimate(
        worker_class=worker_class,
        devices=sorted({job.device for job in jobs}),
        jobs=len(jobs),
        seconds=sum(phase.seconds for phase in phases),
        phases=phases,
    )


def phase_ratios(jobs: list[FinishedRun], rates: TimeRates) -> dict[str, list[float]]:
    """{estimate term: [measured / estimated seconds of each job that ran it]} (module docstring)."""
    ratios: dict[str, list[float]] = {}
    for job in jobs:
        timings, steps = job.summary.get("timings") or {}, job.summary.get("steps")
        estimated = _time_terms(job, rates)
        max_steps = (job.spec.get("training") or {}).get("max_steps")
        if not estimated or not isinstance(steps, int) or not max_steps:
            continue
        diverged = job.summary.get("outcome") == "diverged"
        for name, phases in MEASURED.items():
            measured = [timings[phase] for phase in phases if isinstance(timings.get(phase), (int, float))]
            if not measured or estimated.get(name, 0.0) <= 0:
                continue
            if name == "training":
                if steps > 0:
                    ratios.setdefault(name, []).append(sum(measured) / steps / (estimated[name] / max_steps))
            elif not diverged and (steps >= max_steps or name not in ALONG_PATH):
                ratios.setdefault(name, []).append(sum(measured) / estimated[name])
    return ratios


def _time_terms(job: FinishedRun, rates: TimeRates) -> dict[str, float] | None:
    """Seconds per term of a stored job's estimate at `rates`, cached by spec hash; None if it cannot be planned."""
    key = (job.spec_hash, rates)
    if key not in _time_terms_cache:
        if len(_time_terms_cache) >= _CACHE_SIZE:
            _time_terms_cache.clear()
        try:
            terms = {term.name: term.value for term in estimate_job(JobSpec.model_validate(job.spec), rates).time}
        except ValueError:  # pydantic's ValidationError is one
            terms = None
        _time_terms_cache[key] = terms
    return _time_terms_cache[key]


def _resource(kind: type[JobEstimate], estimate: Estimate, **extra) -> JobEstimate:
    return kind(
        memory_bytes=estimate.memory_bytes,
        flops=estimate.flops,
        memory={term.name: int(term.value) for term in estimate.memory},
        work={term.name: term.value for term in estimate.work},
        seconds=estimate.seconds,
        time={term.name: term.value for term in estimate.time},
        phases=_phases(estimate),
        rates=rates_used(estimate.rates),
        **extra,
    )


def _phases(estimate: Estimate) -> list[EstimatePhase]:
    """The time terms, largest first, each with its FLOPs and dispatched operations."""
    flops = {term.name: term.value for term in estimate.work}
    operations = {term.name: term.value for term in estimate.ops}
    phases = [
        EstimatePhase(
            name=term.name,
            seconds=term.value,
            flops=flops.get(term.name, 0.0),
            operations=operations[term.name],
            what=term.what,
        )
        for term in estimate.time
    ]
    return sorted(phases, key=lambda phase: -phase.seconds)

"""A job's estimate as the API shows it: on the job (GET /v1/jobs/{id}) and before it runs (POST /v1/jobs?dry_run=true).

Both evaluate api_schemas/estimate.py at this deployment's rates, those the time cap is checked at
(service/caps.py:time_rates), so a dry run answers the estimate the job then carries. Per phase φ

    seconds_φ = FLOPs_φ / (R / s_φ) + operations_φ · t_op,     seconds = Σ_φ seconds_φ

with R = estimate_flops_per_s, t_op = estimate_seconds_per_op and s_φ = 8 for the model Hessian's
memory-bound FLOPs (1 otherwise). The workers report no measured throughput: R and t_op are the
settings', and `rates.source` says whether they are the shipped calibration or this deployment's own.
"""

from __future__ import annotations

from api_schemas.estimate import FLOPS_PER_S, SECONDS_PER_OP, Estimate, estimate_job
from api_schemas.resources import EstimateCap, EstimatePhase, EstimateRates, JobDryRun, JobEstimate
from api_schemas.spec import JobSpec
from config.settings import Settings
from service.caps import time_rates

DEFAULT_RATES = (
    "the shipped calibration: bench/bench_time_estimate.py on one CPU core of the reference machine "
    '(docs/benchmarks.md, "Time estimate"), not measured on this deployment\'s workers; run that bench on a '
    "worker and set NTKLAB_ESTIMATE_FLOPS_PER_S and NTKLAB_ESTIMATE_SECONDS_PER_OP"
)
DEPLOYMENT_RATES = (
    "set by this deployment (settings estimate_flops_per_s and estimate_seconds_per_op, "
    "NTKLAB_ESTIMATE_FLOPS_PER_S and NTKLAB_ESTIMATE_SECONDS_PER_OP)"
)


def rates_used(settings: Settings) -> EstimateRates:
    """The time rates of this deployment and their source: the defaults unless either setting differs."""
    rates = time_rates(settings)
    shipped = (rates.flops_per_s, rates.seconds_per_op) == (FLOPS_PER_S, SECONDS_PER_OP)
    return EstimateRates(
        flops_per_s=rates.flops_per_s, seconds_per_op=rates.seconds_per_op,
        source="default" if shipped else "settings", detail=DEFAULT_RATES if shipped else DEPLOYMENT_RATES,
    )


def job_estimate(spec: JobSpec, settings: Settings) -> JobEstimate:
    """The estimate of a validated spec; raises ValueError (naming the field) for a model it cannot plan."""
    return _resource(JobEstimate, estimate_job(spec, time_rates(settings)), settings)


def stored_estimate(document: dict, settings: Settings) -> JobEstimate | None:
    """The estimate of a stored spec; None for one it cannot plan."""
    try:
        return job_estimate(JobSpec.model_validate(document), settings)
    except ValueError:  # pydantic's ValidationError is one
        return None


def dry_run(spec: JobSpec, parameters: int, settings: Settings) -> JobDryRun:
    """The estimate of a spec that passed the caps (service/caps.py:check_spec_caps), with those caps."""
    estimate = estimate_job(spec, time_rates(settings))
    caps = [
        EstimateCap(setting="max_job_memory_bytes", limit=settings.max_job_memory_bytes, value=estimate.memory_bytes),
        EstimateCap(setting="max_job_flops", limit=settings.max_job_flops, value=estimate.flops),
        EstimateCap(setting="max_job_seconds", limit=settings.max_job_seconds, value=estimate.seconds),
    ]
    return _resource(JobDryRun, estimate, settings, parameters=parameters, caps=caps)


def _resource(kind: type[JobEstimate], estimate: Estimate, settings: Settings, **extra) -> JobEstimate:
    return kind(
        memory_bytes=estimate.memory_bytes, flops=estimate.flops,
        memory={term.name: int(term.value) for term in estimate.memory},
        work={term.name: term.value for term in estimate.work},
        seconds=estimate.seconds, time={term.name: term.value for term in estimate.time},
        phases=_phases(estimate), rates=rates_used(settings), **extra,
    )


def _phases(estimate: Estimate) -> list[EstimatePhase]:
    """The time terms, largest first, each with its FLOPs and dispatched operations."""
    flops = {term.name: term.value for term in estimate.work}
    operations = {term.name: term.value for term in estimate.ops}
    phases = [
        EstimatePhase(name=term.name, seconds=term.value, flops=flops.get(term.name, 0.0),
                      operations=operations[term.name], what=term.what)
        for term in estimate.time
    ]
    return sorted(phases, key=lambda phase: -phase.seconds)

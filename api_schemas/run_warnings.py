"""A warning on a finished job or a fit: a result that should not be read at face value.

    code                        raised when (docs/api.md, "Warnings")
    kernel_dominated_by_group   one parameter tensor carries more than 90 % of tr K(w₀)
    target_loss_not_reached     training stopped at max_steps or time_budget_s above target_loss
    head_cannot_reach_targets   (mse) a target lies outside the closure of the head's image
    hessian_not_converged       a reported Hessian value's residual bound exceeds tolerance·|θ|
    head_curvature_zero         the Hessian was measured through a head with φ''(0) = 0 (tanh, sigmoid)
    infinite_width_quadrature_inexact   Θ∞'s quadrature error exceeds diagnostics.infinite_width.quadrature_tolerance

A job's warnings are computed by the engine (engine/diagnostics/run_warnings.py) and stored in a
column of their own (jobs.warnings, migration 0016); the job resource and a sweep's rows show them
as their own field. A fit carries those of the points it was fitted on
(analysis/fit_warnings.py), one entry per code, and one of its own:

    standard_parameterization_fixed_lr  the fit compares widths in standard parameterization at a
                                        fixed numeric lr (analysis/width_regime.py)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, JsonValue


class RunWarning(BaseModel):
    """`code` (stable, for programs), `message` (for people) and the numbers behind it in `values`."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(examples=["target_loss_not_reached"])
    message: str
    values: dict[str, JsonValue] = Field(default_factory=dict, examples=[{"final_loss": 0.084, "target_loss": 0.001}])

"""The paper's experiments as sweeps, at three scales.

smoke: seconds, for tests.  cpu: minutes on a 2-core CPU (widths up to ~10⁴–10⁵).
paper: the widths of Liu, Zhu & Belkin (2020) (to m = 10⁶): up to ~25 min a point on one CPU core, ~10 h
of one core for all seven presets by the estimate (docs/reproduction.md, "At paper scale"), faster on a GPU
worker. No scale is refused for want of a GPU: every point is held to the deployment's caps
(max_job_seconds at its calibrated rates) at submission, as any job is.

Every preset is a documented SweepSpec: a base job, a grid, and the fits that carry the
claim. docs/reproduction.md sets each claim beside the number ntklab measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ntklab.analysis.figure_titles import PRESET_TITLES
from ntklab.api_schemas.sweeps import FitSpec, SweepSpec

Scale = Literal["smoke", "cpu", "paper"]
SCALES: tuple[Scale, ...] = ("smoke", "cpu", "paper")
HEADS = ["identity", "softmax", "swish"]


Theory = dict[str, dict[str, float]]


@dataclass(frozen=True)
class Preset:
    """`theory` is the slope the paper predicts for each fit: {y: {group label: slope}}, the group label
    as analysis/labels.py writes it ("linear head", "ntk"; "all" for a fit without group_by). It is
    the one source of the theory lines: written into the sweep's fit specs, returned by GET /v1/presets
    and, per group, as each fit's theory_slope."""

    name: str
    title: str
    claim: str
    build: Callable[[Scale], SweepSpec]
    theory: Theory = field(default_factory=dict)

    def sweep(self, scale: Scale) -> SweepSpec:
        """The preset's sweep at `scale`, each fit carrying the theory slopes stated for its y."""
        spec = self.build(scale)
        fits = [fit.model_copy(update={"theory": {**fit.theory, **self.theory.get(fit.y, {})}}) for fit in spec.fits]
        return spec.model_copy(update={"fits": fits})


def _data(n: int = 16, d: int = 8) -> dict[str, Any]:
    """The synthetic set: two well-separated Gaussian classes, one-hot targets."""
    return {
        "kind": "gaussian_mixture",
        "n_train": n,
        "input_dim": d,
        "classes": 2,
        "sigma": 0.5,
        "mean_scale": 1.0,
        "seed": 0,
        "standardize": False,
    }


def _training(max_steps: int) -> dict[str, Any]:
    """Gradient descent to loss 1e-3. A run stops there, so max_steps is a cap that costs only the points
    needing it; it is set so that every point of a preset reaches the target (at smoke scale the slowest
    point, the swish head at m = 300, takes 1211 steps; finite-to-infinite's, standard at m = 1024, 2098)."""
    return {"optimizer": "gd", "loss": "mse", "lr": "auto", "max_steps": max_steps, "target_loss": 1e-3}


def _diagnostics(*, kernel_points: int = 24, hessian_steps: int = 0) -> dict[str, Any]:
    """Kernel on `kernel_points` log-spaced steps; the Hessian at init by at most `hessian_steps` Lanczos steps (0: none)."""
    return {
        "kernel": {"schedule": "log", "points": kernel_points, "method": "auto"},
        # certified to 1e-2·|θ|, which moves a log-log slope over a decade of widths by < 0.005 (the spec's default
        # 1e-6 would raise hessian_not_converged: bounds reach 2e-3·|θ| at smoke scale); a run stops there, so the
        # step cap costs only where needed
        "hessian": {"at": ["init"], "top_k": 1, "probe_points": 2, "iterations": hessian_steps, "tolerance": 1e-2}
        if hessian_steps
        else None,
        "weight_change": True,
        "layer_sensitivity": False,
        "linearization_error": True,
        "save_kernels": ["init", "final"],
        "save_weights": False,
    }


def _by_scale(scale: Scale, smoke, cpu, paper):
    return {"smoke": smoke, "cpu": cpu, "paper": paper}[scale]


def _hessian_steps(scale: Scale) -> int:
    """Lanczos steps: at cpu scale 24 left residual bounds up to 2.2e-2·|θ| (table1-hessian at m = 10⁵,
    param-check) and 32 up to 3.9e-2 (param-check, m = 3000, seed 1); 48 meet 1e-2 at every point. At paper
    scale 24, the most whose float64 basis keeps param-check (m = 6000, p = 3.6e7) within
    max_job_memory_bytes (8 GiB)."""
    return _by_scale(scale, 48, 48, 24)


def fig1_width(scale: Scale) -> SweepSpec:
    widths = _by_scale(
        scale, [30, 100, 300], [30, 100, 300, 1000, 3000, 10_000], [30, 100, 1000, 10_000, 100_000, 1_000_000]
    )
    seeds = _by_scale(scale, [0], [0, 1], [0, 1, 2])
    return SweepSpec(
        name=f"fig1-width ({scale})",
        tags=["preset", "fig1-width"],
        base={
            "model": {"hidden": [widths[0]], "activation": "tanh", "bias": False},
            "data": _data(),
            "training": _training(_by_scale(scale, 2000, 2000, 5000)),
            "diagnostics": _diagnostics(),
        },
        grid={"model.hidden.0": widths, "model.output_activation": HEADS, "seed": seeds},
        fits=[FitSpec(y="delta_k_max", x="model.hidden.0", group_by=["model.output_activation"])],
    )


def fig1_time(scale: Scale) -> SweepSpec:
    width = _by_scale(scale, 300, 10_000, 10_000)
    return SweepSpec(
        name=f"fig1-time ({scale})",
        tags=["preset", "fig1-time"],
        base={
            "model": {"hidden": [width], "activation": "tanh", "bias": False},
            "data": _data(),
            "training": _training(_by_scale(scale, 2000, 2000, 5000)),
            "diagnostics": _diagnostics(kernel_points=50),
        },
        grid={"model.output_activation": HEADS},
        fits=[],
    )


def fig2_bottleneck(scale: Scale) -> SweepSpec:
    width = _by_scale(scale, 200, 2000, 10_000)
    bottlenecks = _by_scale(scale, [3, 10, 50], [3, 5, 10, 50, 100, 500], [3, 5, 10, 50, 100, 500, 1000])
    return SweepSpec(
        name=f"fig2-bottleneck ({scale})",
        tags=["preset", "fig2-bottleneck"],
        base={
            "model": {"hidden": [width, bottlenecks[0], width], "activation": "tanh", "bias": False},
            "data": _data(),
            "training": _training(_by_scale(scale, 2000, 2000, 5000)),
            "diagnostics": _diagnostics(),
        },
        grid={"model.hidden.1": bottlenecks, "seed": _by_scale(scale, [0], [0, 1], [0, 1, 2])},
        fits=[FitSpec(y="delta_k_max", x="model.hidden.1")],
    )


def table1_hessian(scale: Scale) -> SweepSpec:
    widths = _by_scale(
        scale, [100, 300, 1000], [1000, 3000, 10_000, 30_000, 100_000], [1000, 10_000, 100_000, 1_000_000]
    )
    bottleneck = 3
    families = []
    for width in widths:
        families.append(["linear head", [width], "identity"])
        families.append(["swish head", [width], "swish"])
        families.append(["bottleneck", [width, bottleneck, width], "identity"])
    return SweepSpec(
        name=f"table1-hessian ({scale})",
        tags=["preset", "table1-hessian"],
        base={
            "model": {"hidden": [widths[0]], "activation": "tanh", "bias": False},
            "data": _data(),
            "training": _training(0),
            "diagnostics": _diagnostics(hessian_steps=_hessian_steps(scale)),
        },
        grid={"name,model.hidden,model.output_activation": families, "seed": _by_scale(scale, [0], [0, 1], [0, 1, 2])},
        fits=[FitSpec(y="hessian_norm_init", x="model.hidden.0", group_by=["name"])],
    )


def param_check(scale: Scale) -> SweepSpec:
    """Two hidden layers of width m, so every layer but the first has fan-in m: switching ntk → standard
    rescales those layers' kernel and Hessian by the same factor m, and ‖H‖/K keeps its m^-1/2 scaling;
    meanfield's 1/m readout does not (‖H‖/K = Θ(1))."""
    widths = _by_scale(scale, [64, 256], [100, 300, 1000, 3000], [100, 300, 1000, 3000, 6000])
    return SweepSpec(
        name=f"param-check ({scale})",
        tags=["preset", "param-check"],
        base={
            "model": {"hidden": [widths[0], widths[0]], "activation": "tanh", "bias": False},
            "data": _data(),
            "training": _training(0),
            "diagnostics": _diagnostics(hessian_steps=_hessian_steps(scale)),
        },
        grid={
            "model.hidden.0,model.hidden.1": [[m, m] for m in widths],
            "model.parameterization": ["ntk", "standard", "meanfield"],
            "seed": _by_scale(scale, [0], [0, 1], [0, 1, 2]),
        },
        fits=[
            FitSpec(y="hessian_kernel_ratio_init", x="model.hidden.0", group_by=["model.parameterization"]),
            FitSpec(y="hessian_norm_init", x="model.hidden.0", group_by=["model.parameterization"]),
        ],
    )


def lazy_is_not_small(scale: Scale) -> SweepSpec:
    widths = _by_scale(
        scale, [30, 100, 300], [30, 100, 300, 1000, 3000, 10_000], [30, 100, 1000, 10_000, 100_000, 1_000_000]
    )
    return SweepSpec(
        name=f"lazy-is-not-small ({scale})",
        tags=["preset", "lazy-is-not-small"],
        base={
            "model": {"hidden": [widths[0]], "activation": "tanh", "bias": False},
            "data": _data(),
            "training": _training(_by_scale(scale, 2000, 2000, 5000)),
            "diagnostics": _diagnostics(),
        },
        grid={"model.hidden.0": widths, "seed": _by_scale(scale, [0], [0, 1], [0, 1, 2])},
        fits=[FitSpec(y="weight_change_l2", x="model.hidden.0"), FitSpec(y="weight_change_linf", x="model.hidden.0")],
    )


def finite_to_infinite(scale: Scale) -> SweepSpec:
    """One tanh layer of width m with biases, under ntk and standard: the distance of the logits' tangent
    kernel from its infinite-width limit Θ∞, ‖K(w₀) − Θ∞‖_F / ‖Θ∞‖_F, is an average of m i.i.d. terms' fluctuation.
    Under standard parameterization the readout's share of tr K is m·E[σ²] against Θ(1) for the hidden layer
    (share 0.97 at m = 256, 0.99 at 1024, d = 8): its wide points raise kernel_dominated_by_group, which is
    that parameterization's physics, not a defect of the preset."""
    widths = _by_scale(scale, [64, 256, 1024], [64, 256, 1024, 4096, 16_384], [256, 4096, 65_536, 1_000_000])
    diagnostics = {**_diagnostics(), "linearization_error": False, "infinite_width": {}}
    return SweepSpec(
        name=f"finite-to-infinite ({scale})",
        tags=["preset", "finite-to-infinite"],
        base={
            "model": {"hidden": [widths[0]], "activation": "tanh"},
            "data": _data(),
            "training": _training(_by_scale(scale, 3000, 3000, 5000)),
            "diagnostics": diagnostics,
        },
        grid={
            "model.hidden.0": widths,
            "model.parameterization": ["ntk", "standard"],
            "seed": _by_scale(scale, [0], [0, 1], [0, 1, 2]),
        },
        fits=[
            FitSpec(y="kernel_inf_distance_init", x="model.hidden.0", group_by=["model.parameterization"]),
            FitSpec(y="kernel_inf_distance_final", x="model.hidden.0", group_by=["model.parameterization"]),
        ],
    )


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            "fig1-width",
            PRESET_TITLES["fig1-width"],
            "ΔK falls like a power of m with a linear head and stays Θ(1) with a non-linear head.",
            fig1_width,
            theory={"delta_k_max": {"linear head": -0.5, "softmax head": 0.0, "swish head": 0.0}},
        ),
        Preset(
            "fig1-time",
            PRESET_TITLES["fig1-time"],
            "With a non-linear head ΔK(t) grows to Θ(1); with a linear head it stays near 0.",
            fig1_time,
        ),
        Preset(
            "fig2-bottleneck",
            PRESET_TITLES["fig2-bottleneck"],
            "A narrow bottleneck keeps the kernel moving; widening it makes ΔK smaller.",
            fig2_bottleneck,
        ),
        Preset(
            "table1-hessian",
            PRESET_TITLES["table1-hessian"],
            "‖H‖ ~ m^-1/2 with a linear head; Θ(1) with a non-linear head or a bottleneck.",
            table1_hessian,
            theory={"hessian_norm_init": {"linear head": -0.5, "swish head": 0.0, "bottleneck": 0.0}},
        ),
        Preset(
            "param-check",
            PRESET_TITLES["param-check"],
            "ntk and standard rescale ‖H‖ and K alike (same ‖H‖/K ∝ m^-1/2); meanfield's ‖H‖/K does not fall.",
            param_check,
            theory={"hessian_kernel_ratio_init": {"ntk": -0.5, "standard": -0.5, "meanfield": 0.0}},
        ),
        Preset(
            "lazy-is-not-small",
            PRESET_TITLES["lazy-is-not-small"],
            "The weights as a whole move O(1); each single weight moves O(1/√m).",
            lazy_is_not_small,
            theory={"weight_change_l2": {"all": 0.0}, "weight_change_linf": {"all": -0.5}},
        ),
        Preset(
            "finite-to-infinite",
            PRESET_TITLES["finite-to-infinite"],
            "‖K(w₀) − Θ∞‖_F / ‖Θ∞‖_F falls like m^-1/2 under ntk and standard parameterization. Under standard "
            "the readout carries tr K ∝ m and the hidden layer Θ(1), so its wide points warn "
            "kernel_dominated_by_group: the physics of that parameterization, as the warning says.",
            finite_to_infinite,
            theory={"kernel_inf_distance_init": {"ntk": -0.5, "standard": -0.5}},
        ),
    )
}

"""The infinite-width kernels Θ∞ (NTK) and Σ∞ (NNGP) of a spec's network on the probe set, and how far
the finite network's tangent kernel is from Θ∞ (`diagnostics.infinite_width`).

    infinite_width_report(spec, net, x, kernels_init, kernels_final, ...) -> (summary, artifacts)

The network is read from the spec — the layer plan (api_schemas/graph_plan.py) of its graph, or of the
graph an mlp, cnn or resnet is shorthand for (planner/builtin_graphs.py) — as a sequence of the layer maps of
engine/limits/limit_maps.py, each weight layer with ρ = c²·fan_in from the same rule
(parameterization.py) the network's weights were drawn with. api_schemas/infinite_width.py
refuses at submission what has no limit (meanfield, onnx, max_pool, layer_norm, attention, …).

With O logits the limit kernel is Θ∞ ⊗ I_O (the outputs are independent), so

    kernel_inf_distance = ‖K(w) − Θ∞ ⊗ I_O‖_F / ‖Θ∞ ⊗ I_O‖_F      K(w) the logits' kernel [n·O, n·O]

at w₀ (`_init`) and at the last weights (`_final`), which falls like m^−½ at init under ntk
and standard parameterization; `lambda_min_inf` = λ_min(Θ∞). Under standard parameterization
ρ = fan_in grows with the widths, so Θ∞ is the limit kernel at the spec's widths (Θ/m
converges; see docs/diagnostics.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn

from ntklab.api_schemas.graph import ActivationLayer, AvgPool, Conv2d, Dense, Flatten, GlobalAvgPool, Residual
from ntklab.api_schemas.graph_plan import PlannedLayer, layer_bias
from ntklab.api_schemas.infinite_width import refusal
from ntklab.api_schemas.spec import AnyModel, JobSpec
from ntklab.engine.artifacts import npy_artifact
from ntklab.engine.callbacks import Checkpoint, no_checkpoint
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.limits import limit_maps
from ntklab.engine.limits.limit_maps import Moments
from ntklab.engine.nets.parameterization import multiplier_and_std
from ntklab.engine.result import Artifact, Scalar
from ntklab.planner.architecture import graph_input_shape, plan_model_graph
from ntklab.planner.builtin_graphs import as_graph

LayerMap = Callable[[Moments], Moments]


@dataclass(frozen=True)
class LimitKernels:
    """Θ∞ and Σ∞ [n, n] (float64) of each logit; quadrature_error: the largest estimated relative error (0: closed forms)."""

    ntk: Tensor
    nngp: Tensor
    quadrature_error: float


def limit_kernels(
    model: AnyModel, x: Tensor, *, tolerance: float = 1e-10, checkpoint: Checkpoint = no_checkpoint
) -> LimitKernels:
    """Θ∞ and Σ∞ of the spec's network on the points x [n, …] (one point's shape is the data's);
    checkpoint() is called after each map (a weight layer, an activation, a residual block, a pooling)."""
    why = refusal(model)
    if why is not None:
        raise ValueError(why)
    state, maps = _layer_maps(model, x, tolerance)
    for layer_map in maps:
        state = layer_map(state)
        checkpoint()
    return LimitKernels(state.Θ[:, :, 0, 0], state.K[:, :, 0, 0], state.error)


def _layer_maps(model: AnyModel, x: Tensor, tolerance: float) -> tuple[Moments, list[LayerMap]]:
    """The input's moments and the maps of every layer, the readout last."""
    rho = partial(_rho, model.parameterization)
    act = partial(_activation, tolerance=tolerance)
    graph = as_graph(model, tuple(x.shape[1:]))
    shape = graph_input_shape(graph, tuple(x.shape[1:]))
    plan = plan_model_graph(graph, tuple(x.shape[1:]))
    maps = [_graph_map(planned, graph, rho, act) for planned in plan.layers]
    features = plan.features
    readout = partial(
        limit_maps.dense, rho=rho(features, readout=True), bias=model.bias, trainable=model.train_output_layer
    )
    return _input_moments(x, shape), [*maps, readout]


def _input_moments(x: Tensor, shape: tuple[int, ...]) -> Moments:
    """x as values [n, C, P]: a vector [d] is d channels at one position, tokens [T, d] d channels at T."""
    n = x.shape[0]
    if len(shape) == 1:
        return limit_maps.of_input(x.reshape(n, shape[0], 1), ())
    if len(shape) == 2:
        return limit_maps.of_input(x.reshape(n, *shape).transpose(1, 2), (shape[0],))
    return limit_maps.of_input(x.reshape(n, shape[0], shape[1] * shape[2]), tuple(shape[1:]))


def _rho(parameterization: str, fan_in: int, *, readout: bool = False) -> float:
    """ρ = c²·fan_in of a weight layer; its c·std must be 1/√fan_in (not so for meanfield's readout)."""
    c, std = multiplier_and_std(fan_in, parameterization, readout=readout)
    if not math.isclose(c * std * math.sqrt(fan_in), 1.0, rel_tol=1e-9):
        raise ValueError(f"model.parameterization {parameterization!r} has no infinite-width limit")
    return c * c * fan_in


def _activation(name: str, *, tolerance: float) -> LayerMap:
    return partial(limit_maps.activation, name=name, tolerance=tolerance)


def _graph_map(planned: PlannedLayer, model: AnyModel, rho, act) -> LayerMap:
    layer, shape = planned.layer, planned.in_shape
    bias = layer_bias(layer, model.bias)
    if isinstance(layer, Dense):
        return partial(limit_maps.dense, rho=rho(shape[-1]), bias=bias)
    if isinstance(layer, Conv2d):
        return partial(
            limit_maps.conv,
            kernel_size=layer.kernel_size,
            stride=layer.stride,
            padding=layer.padding,
            rho=rho(shape[0] * layer.kernel_size**2),
            bias=bias,
        )
    if isinstance(layer, AvgPool):
        return partial(_avg_pool, kernel_size=layer.kernel_size, stride=layer.step(), padding=layer.padding)
    if isinstance(layer, GlobalAvgPool):
        return _global_pool
    if isinstance(layer, Flatten):
        return limit_maps.flatten
    if isinstance(layer, ActivationLayer):
        return act(layer.name)
    if isinstance(layer, Residual):
        branch = [_graph_map(inner, model, rho, act) for inner in planned.branch]
        return partial(_residual, branch=branch, projection=_projection(planned, rho), scale=layer.scale)
    raise ValueError(f"{planned.path} ({layer.type}) has no infinite-width limit")


def _projection(planned: PlannedLayer, rho) -> LayerMap | None:
    """The residual's bias-free skip projection: dense for vectors and tokens, 1×1 strided conv for images."""
    stride, shape = planned.projection_stride, planned.in_shape
    if stride is None:
        return None
    if len(shape) < 3:
        return partial(limit_maps.dense, rho=rho(shape[-1]), bias=False)
    return partial(limit_maps.conv, kernel_size=1, stride=stride, padding=0, rho=rho(shape[0]), bias=False)


def _chain(maps: list[LayerMap]) -> LayerMap:
    def apply(state: Moments) -> Moments:
        for layer_map in maps:
            state = layer_map(state)
        return state

    return apply


def _residual(state: Moments, *, branch: list[LayerMap], projection: LayerMap | None, scale: float) -> Moments:
    """skip + s·branch; the branch maps a copy of the state (a map consumes its input, limit_maps.py)."""
    branch_input = state.copy()
    skip = state if projection is None else projection(state)
    return limit_maps.residual(skip, _chain(branch)(branch_input), scale)


def _avg_pool(state: Moments, *, kernel_size: int, stride: int, padding: int) -> Moments:
    L, grid = limit_maps.avg_pool_operator(state.grid, kernel_size, stride, padding, state.K.device)
    return limit_maps.pool(state, L, grid)


def _global_pool(state: Moments) -> Moments:
    return limit_maps.pool(state, limit_maps.global_pool_operator(state.K.shape[-1], state.K.device), ())


# --------------------------------------------------------------------------- the run's diagnostic


def kernel_inf_distance(K: Tensor, theta: Tensor) -> float:
    """‖K − Θ ⊗ I_O‖_F / ‖Θ ⊗ I_O‖_F for K [n·O, n·O] (row i·O + a) and Θ [n, n]."""
    n = theta.shape[0]
    outputs = K.shape[0] // n
    blocks = K.to(torch.float64).reshape(n, outputs, n, outputs)
    limit = theta[:, None, :, None] * torch.eye(outputs, dtype=torch.float64, device=theta.device)[None, :, None, :]
    return (
        torch.linalg.matrix_norm((blocks - limit).reshape(n * outputs, -1))
        / (math.sqrt(outputs) * torch.linalg.matrix_norm(theta))
    ).item()


def infinite_width_report(
    spec: JobSpec,
    net: nn.Module,
    x: Tensor,
    kernels_init: dict[str, Tensor],
    kernels_final: dict[str, Tensor] | None,
    *,
    finite: bool,
    method: str,
    checkpoint: Checkpoint = no_checkpoint,
) -> tuple[dict[str, Scalar], dict[str, Artifact]]:
    """Summary (kernel_inf_distance_init/_final, lambda_min_inf, kernel_inf_quadrature_error) and artifacts
    (kernel_inf.npy = Θ∞, nngp_inf.npy = Σ∞, both [n, n]). The final logits' kernel is the one measured
    along the path when there is one, else computed here; None after divergence."""
    limit = limit_kernels(
        spec.model, x, tolerance=spec.diagnostics.infinite_width.quadrature_tolerance, checkpoint=checkpoint
    )
    of = "logits" if "logits" in kernels_init else "outputs"
    final = None
    if finite:
        final = (
            kernels_final[of]
            if kernels_final is not None
            else tangent_kernel(net, x, method=method, of="logits", checkpoint=checkpoint)
        )
    summary: dict[str, Scalar] = {
        "kernel_inf_distance_init": kernel_inf_distance(kernels_init[of], limit.ntk),
        "kernel_inf_distance_final": None if final is None else kernel_inf_distance(final, limit.ntk),
        "lambda_min_inf": torch.linalg.eigvalsh(limit.ntk)[0].item(),
        "kernel_inf_quadrature_error": limit.quadrature_error,
    }
    return summary, {"kernel_inf.npy": npy_artifact(limit.ntk), "nngp_inf.npy": npy_artifact(limit.nngp)}

"""What the infinite-width kernels cost (engine/limits/infinite_width.py), from the layer plan alone.

    limit_cost(spec) -> LimitCost        per pair of probe points: live entries, FLOPs; per point: FLOPs

The engine carries, for every pair (i, j) of the n probe points, float64 matrices [P, P] over the P
positions of a representation (P = 1 for vectors, T tokens, H·W pixels): K and Θ [n, n, P, P]
(engine/limits/limit_maps.py). Each layer map holds its input's K and Θ, its output's, and (the
maps not run block by block) a few same-sized temporaries; counted from the code, with P_in and P
the positions it reads and writes (Q = P², and likewise Q_in):

    map             live entries per pair                     FLOPs per pair
    input           2·Q  (K, Θ = 0)                           2·C·Q            (K = values·valuesᵀ/C)
    dense           2·Q_in + 3·Q  (K + b, ρK + b + Θ)          4·Q
    conv k×k        2·Q where the grid is kept (K', Θ'         8·k·Q_in + 4·Q   (per tensor, k row then k column
                    written over K, Θ), else 2·Q_in + 2·Q;                      offsets, a multiply-add each over
                    the window sums run block by block of                      ≤ Q_in entries; then K', Θ')
                    pairs, engine/limits/diagonal_windows.py
    activation      closed form (relu, erf, identity,          closed form: 30·Q; else Mehler's series of at most
                    quadratic): 2·Q, E and E'·Θ written over   MEHLER_TERMS terms: (4·MEHLER_TERMS + 20)·Q
                    K and Θ block by block of pairs; else
                    12·Q: K, Θ, ρ, Horner's running sum of σ
                    and σ' [·, 2] with its two products and
                    their sum (gauss_hermite.series), and the
                    masks
    pool L [P', P]  2·Q_in + 2·P'·P_in + 2·Q                   4·(P'·P_in² + P'²·P_in)
    residual        its branch's (which maps a copy of the     its branch's + 6·Q
                    state) + 2·Q_in + 2·Q (skip, sum)

and per probe point, for an activation without a closed form, the Hermite coefficients of σ and σ'
by every rule up to the largest: P · Σ_N 2·N² (a [2, P, N] × [N, N/2] product per rule N of
RULES). The estimate takes the largest map's live entries (the maps run one after the other) and
the sum of their FLOPs (the blocked maps' bounded temporaries, engine/limits/pair_blocks.BLOCK_ENTRIES
entries each, are not per pair and not counted; where a block holds less than a row of pairs those maps
compute each unordered pair once and mirror it, so their FLOPs here are up to twice the work done).
Not counted: the two-dimensional polar rule for the pairs Mehler's series cannot bound (near ρ = ±1
at a large variance; chunked, so bounded memory), which is a small fraction of the pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ntklab.api_schemas.graph import ActivationLayer, AvgPool, Conv2d, Dense, GlobalAvgPool, Residual
from ntklab.api_schemas.graph_plan import PlannedLayer
from ntklab.api_schemas.spec import JobSpec, input_dim
from ntklab.planner.architecture import graph_input_shape, plan_model_graph
from ntklab.planner.builtin_graphs import as_graph

CLOSED_FORMS = frozenset({"relu", "erf", "identity", "quadratic"})
RULES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
"""engine/limits/gauss_hermite.ORDERS (a test keeps them equal): the Gauss–Hermite rules tried."""
ACTIVATION_TENSORS = 12
"""[n, n, P, P] tensors alive at once in the map of an activation without a closed form (module docstring)."""
CLOSED_FORM_TENSORS = 2
"""[n, n, P, P] tensors alive at once in a closed-form activation's map: K and Θ, overwritten (module docstring)."""
MEHLER_TERMS = RULES[-1] // 4
"""The most terms of Mehler's series the largest rule keeps: an upper bound on the series' length."""


@dataclass(frozen=True)
class LimitCost:
    """live: the largest map's float64 entries per pair of points; pair_flops, point_flops: the FLOPs per
    pair and per point, summed over the maps (module docstring)."""

    live: int = 0
    pair_flops: float = 0.0
    point_flops: float = 0.0

    def then(self, other: LimitCost) -> LimitCost:
        """Two maps one after the other: the larger working set, the work added."""
        return LimitCost(
            max(self.live, other.live), self.pair_flops + other.pair_flops, self.point_flops + other.point_flops
        )


def limit_cost(spec: JobSpec) -> LimitCost:
    """The cost of Θ∞ and Σ∞ of the spec's network (a graph, or the graph an mlp, cnn or resnet is shorthand
    for), the readout last; ValueError if it cannot be planned."""
    input_shape = spec.image_shape() or (input_dim(spec.data),)
    graph = as_graph(spec.model, input_shape)
    shape = graph_input_shape(graph, input_shape)
    cost = _input(_channels(shape), _positions(shape))
    for planned in plan_model_graph(graph, input_shape).layers:
        cost = cost.then(_graph_layer(planned))
    return cost.then(_dense(1, 1))


def _positions(shape: tuple[int, ...]) -> int:
    """P of a representation: 1 for a vector [d], T for tokens [T, d], H·W for an image [C, H, W]."""
    return {1: 1, 2: shape[0]}.get(len(shape), math.prod(shape[1:]))


def _input(channels: int, positions: int) -> LimitCost:
    return LimitCost(2 * positions**2, 2 * channels * positions**2)


def _channels(shape: tuple[int, ...]) -> int:
    """C of a representation: d of a vector [d] or tokens [T, d], C of an image [C, H, W]."""
    return shape[-1] if len(shape) < 3 else shape[0]


def _dense(positions_in: int, positions: int) -> LimitCost:
    return LimitCost(2 * positions_in**2 + 3 * positions**2, 4 * positions**2)


def _conv(grid: tuple[int, int], out: tuple[int, int], k: int) -> LimitCost:
    q_in, q = math.prod(grid) ** 2, math.prod(out) ** 2
    return LimitCost(2 * q if q == q_in else 2 * q_in + 2 * q, 8 * k * q_in + 4 * q)


def _activation(name: str, positions: int) -> LimitCost:
    q = positions**2
    if name in CLOSED_FORMS:
        return LimitCost(CLOSED_FORM_TENSORS * q, 30 * q)
    return LimitCost(
        ACTIVATION_TENSORS * q, (4 * MEHLER_TERMS + 20) * q, positions * sum(2 * rule * rule for rule in RULES)
    )


def _pool(positions_in: int, positions: int) -> LimitCost:
    return LimitCost(
        2 * positions_in**2 + 2 * positions * positions_in + 2 * positions**2,
        4 * (positions * positions_in**2 + positions**2 * positions_in),
    )


def _residual(branch: LimitCost, positions_in: int, positions: int) -> LimitCost:
    return LimitCost(
        branch.live + 2 * positions_in**2 + 2 * positions**2, branch.pair_flops + 6 * positions**2, branch.point_flops
    )


def _graph_layer(planned: PlannedLayer) -> LimitCost:
    layer, p_in, p_out = planned.layer, _positions(planned.in_shape), _positions(planned.out_shape)
    if isinstance(layer, Dense):
        return _dense(p_in, p_out)
    if isinstance(layer, Conv2d):
        return _conv(planned.in_shape[1:], planned.out_shape[1:], layer.kernel_size)
    if isinstance(layer, (AvgPool, GlobalAvgPool)):
        return _pool(p_in, p_out)
    if isinstance(layer, ActivationLayer):
        return _activation(layer.name, p_in)
    if isinstance(layer, Residual):
        branch = LimitCost()
        for inner in planned.branch:
            branch = branch.then(_graph_layer(inner))
        if planned.projection_stride is not None:
            branch = branch.then(_dense(p_in, p_out))
        return _residual(branch, p_in, p_out)
    return LimitCost()  # flatten: positions become features, nothing computed

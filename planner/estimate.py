"""A job's peak memory and work, estimated from its spec alone (nothing built, nothing run).

    estimate_job(spec, rates) -> Estimate    memory_bytes, flops, seconds, and the terms they are made of

The service refuses a spec over max_job_memory_bytes, max_job_flops or max_job_seconds (service/caps.py), shows
the estimate on the job, and the worker checks it against its device before it starts. With
the one-example profile of planner/forward_profile.py (F₀ forward FLOPs, a saved and ℓ
largest activation elements, d input elements, P weights, p trainable), n training points,
B = batch_size for a minibatch optimiser (else n), n_p probe points, O outputs, h = 2 kernels
with a non-linear head (outputs and logits) else 1, b bytes per number (4 or 8):

memory terms (bytes)
    data         2·8·n·(d + O)             the training set: two float64 copies while it is made (numpy)
    weights      b·(P·(1 + 2·[save_weights]) + p·(2 + s))     weights, w₀, gradients, optimiser state
                 (s = 1 momentum, 2 adam, else 0) and the two .npz weight artifacts
    constants    an ONNX model's values computed from constants alone, folded once at conversion and held
                 for the job: its upload's bytes with floats at b bytes (forward_profile.constants)
    activations  b·(B·a + a_fix + 2·n·ℓ)   a training step: what autograd saves for B examples, plus two
                                           layers of n examples alive at once (backward, the full-set loss),
                                           plus a_fix, the outputs of an ONNX model's nodes that run once per
                                           forward pass whatever the batch (computed from weights only)
    kernel       (nO)² = (n_p·O)²:  b·(nO)²·(h·(1 + t + k) + 3) + 4·8·(nO)²     K(w₀), and K(w_t) when the
                 kernel is measured along the path (t = 1), per head; the one being computed with its two
                 Gram factors; k saved .npy artifacts (K(w_t)'s only along the path); and the float64
                 copies a spectrum or a relative change makes (K, Kᵀ + K, its half, eigvalsh's own)
    cotangents   the kernel method's working set on the probe points, kernel_cost_model peak − K
                 (structured: per-sample cotangents n_p·O·Σ T·out; jacobian: n_p·O·p; ntk_vp: columns)
    lanczos      8·p·(iterations + 2) + 4·b·p              the float64 Krylov basis, and the HVP's vectors
    infinite_width  8·n_p²·live + 3·8·(n_p·O)²             the layer maps' float64 [n_p, n_p, P, P] moments at the
                 largest map (live entries per pair of points, planner/limit_cost.py: 12·P² for an
                 activation, 2·P_in² + 2·P² for a convolution, …) and the distance's float64 copies
    spectrum     r·(8·p·(S + 6) + 3·b·N·a) + 6·b·p        hessian_spectrum: r = min(probes, ⌊256 MiB / (8·p·(S + 4)
                 + 3·b·N·a)⌋ ∨ 1) probes run together (hessian_spectrum.probe_batch), each with its float64
                 basis of S = lanczos_steps vectors and its Rademacher start, an HVP over N points (n for
                 of = loss, 1 for of = model); the HVP's own vectors
    loss_hessian 3·b·p + b·n·(a + O) + max(8·p·(I + 2) + 3·b·n·a, kernel_cost_model peak at n + 4·8·(nO)²)
                 the three operators (their weights, the Gauss–Newton pullback over the n training points),
                 then a Lanczos norm of I = iterations steps, then K of the n·O training rows and eigvalsh

    peak = max(data, data kept + weights + constants + kernel + max(activations + path, cotangents, lanczos,
                                                                    spectrum, infinite_width))

where data kept = b·n·(d + O) (the float64 copies are gone once the data is on the device) and
path = the largest of cotangents (kernel on the schedule), lanczos (hessian.at "schedule") and
loss_hessian: the path diagnostics run while a full-batch step's graph is alive.

work terms (FLOPs; F = F₀ + a, kernel_cost_model's per-example forward cost; F_fix = an ONNX model's
fixed FLOPs + fixed elements, the work of one forward pass that does not scale with the batch, 0 for
other models)
    training     max_steps·3·(B·F + F_fix) (+ n·F + F_fix per step for a minibatch optimiser's full-set loss):
                 one forward and backward pass per step, the fixed nodes once per pass
    constants    an ONNX model's folding FLOPs: its constant subgraphs computed once, at conversion
    kernel       h·(runs)·kernel_cost_model FLOPs of the method at n_p points + (4/3)(nO)³ per spectrum
    hessian      runs·P_h·O_h·(3F + iterations·(6F + 8p) + 4·iterations²·p)    P_h = min(hessian.probe_points, n_p),
                 O_h = min(hessian.outputs, O) (O when null)
    path         per scheduled step: 3·n_p·F (linearization error) + 4p (weight change)
    infinite_width  n_p²·pair + n_p·point (limit_cost.py: window sums, closed forms or Mehler's series of
                 at most 1024 terms, the Hermite coefficients by every rule) + (4/3)n_p³ (λ_min(Θ∞)), plus the
                 final logits' kernel when diagnostics.kernel is off
    hessian_spectrum  hvps·(6·N·F + 8p + 4·S·p)   hvps = |at|·H·R·S (spectrum_hvps): H Hessians (points·O of
                 the model, 1 of the loss), R = probes + parameter groups (with block_norms) Lanczos runs of
                 S = lanczos_steps HVPs each over N points; 4·S·p per step reorthogonalises
    loss_hessian runs·(3·(I·(6·n·F + 8p) + 4·I²·p) + kernel_cost_model FLOPs at n + (4/3)(nO)³)
    sensitivity  2·n_p·F·(1 + 2O) with diagnostics.layer_sensitivity: a forward and O backward passes, at w₀ and the end
    kernel_trace n_p·(F·(1 + 2O) + 4·O·p): the run warnings' tr K_g(w₀) per weight tensor (engine/kernels/ntk.py)

Every other work term reads F + F_fix as one example's forward cost: it counts the fixed nodes once
per example, as though each had a pass of its own (an upper bound: the kernel methods, HVPs and the
path's checks batch their points' forward passes). The kernel methods' working sets (cotangents,
loss_hessian's kernel) count a_fix per point too (forward_profile.kernel_profile): their cotangents,
one per point and output, run back through those nodes. The activations, spectrum and loss_hessian
memory terms hold a_fix once per pass, or not at all (their vectors are weight-sized).

time (seconds): seconds = Σ_terms FLOPs_term / R + ops_term · t_op, R = rates.flops_per_s and
t_op = rates.seconds_per_op (settings estimate_flops_per_s, estimate_seconds_per_op, calibrated by
bench/bench_time_estimate.py: R on a wide shallow mlp, t_op on a deep narrow one). ops counts the
framework operations a term dispatches whatever their size, in forward passes of D operations
(forward_profile.ops; a backward pass 2·D), W weight tensors, P_h = min(probe_points, n_p):
    training     max_steps·(3·D + [minibatch]·D + c_opt·W + 20 + E)    c_opt = 2 gd/sgd, 3 momentum, 10 adam;
                 E the step's element traffic: (B + [minibatch]·n)·a activation elements and one pass over the
                 weights, per FRESH_ELEMENTS_PER_OP elements in tensors over 32 MiB, else per HEAP_ELEMENTS_PER_OP
    kernel       kernel runs × one kernel pass (no ×h: a non-linear head's outputs kernel follows by the chain
                 rule): structured (1 + 2O)·D + 10·O per covered layer + ⌈(k+1)/2·n_p/m⌉ vmapped chunks of
                 (1 + 2O)·D for the fallback (kernel_cost_model's panels), jacobian (1 + 2O)·D, ntk_vp
                 D·(1 + 3·⌈n_p·O / block⌉)
    hessian      runs·iterations·(⌈P_h·O_h / A⌉·30·D + 30·P_h·O_h)   per Lanczos step one vmapped HVP call per A =
                 max(1, ⌊(B/2) / (8·p·(iterations + 2))⌋) runs advanced together (the bases half the budget holds;
                 engine/curvature/hessian.py), ≈ 30 forward passes' operations through torch.func (measured 33 on a
                 64-layer mlp), and each run's own step; its FLOPs run memory-bound (per-point matrix-vector
                 products, float64 reorthogonalisation): counted at R/8 (MEMORY_BOUND_SLOWDOWN)
    path         runs·(D + 12·D·[linearization_error] + 4·W·[weight_change] + 20)   the jvp's forward mode
                 dispatches about 12 forward passes' operations (measured 8–20 on deep nets and graphs)
    sensitivity  2·((1 + 2O)·D + O·W)
    kernel_trace n_p·((1 + 2O)·D + 2·O·W + O·(⌈p_big / 360⌉ + ⌈(p − p_big) / 1000⌉)): a Python loop over points,
                 each output's weight gradients made per point (p_big elements in tensors over 32 MiB, mapped
                 afresh; FRESH_ELEMENTS_PER_OP, HEAP_ELEMENTS_PER_OP)
    infinite_width  200·W (+ one kernel pass when diagnostics.kernel is off)
    hessian_spectrum  calls·(12·D + 30), calls = |at|·H·(⌈probes / r⌉ + parameter groups)·S
    loss_hessian runs·(3·I·(12·D + 30) + one kernel pass at n)     (their HVPs are batched over points)
    constants    D + 10·W + 5000      building the network, and the job's fixed work
Deep narrow networks are operations (a 2048-layer graph of width 4 ran at under 10⁻⁴ of a wide net's FLOP
rate), wide ones FLOPs; each is within 5× of the measured wall time on the specs of docs/benchmarks.md.

with runs = 1 + the scheduled steps after 0 (log: ≤ points, every: ⌊max_steps/every⌋) + the final
step (the kernel's schedule, or its default when diagnostics.kernel is off; then the kernel itself
is computed once, at w₀). Steps are counted to max_steps: a run that reaches target_loss earlier
does less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ntklab.api_schemas.graph_plan import PlannedLayer
from ntklab.api_schemas.spec import HessianDiagnostics, JobSpec, KernelDiagnostics, input_dim
from ntklab.planner.architecture import plan_model_graph
from ntklab.planner.builtin_graphs import as_graph
from ntklab.planner.forward_profile import ForwardProfile, forward_profile
from ntklab.planner.kernel_cost_model import (
    MEMORY_BUDGET_BYTES,
    Cost,
    cheapest,
    method_costs,
    panel_and_chunk,
    passes,
)
from ntklab.planner.limit_cost import limit_cost

ITEMSIZE = {"float32": 4, "float64": 8}
OPTIMIZER_STATE = {"gd": 0, "sgd": 0, "momentum": 1, "adam": 2}
GENERATION_COPIES = 2
KERNEL_FACTORS = 3
FLOAT64_KERNEL_COPIES = 4
LIMIT_DISTANCE_COPIES = 3
RADEMACHER_COPIES = 2
HVP_VECTORS = 6

FLOPS_PER_S = 6.2e10
SECONDS_PER_OP = 4.9e-6
"""The default time rates (settings estimate_flops_per_s, estimate_seconds_per_op), calibrated by
bench/bench_time_estimate.py on the reference machine (docs/benchmarks.md, "Time estimate")."""
OPTIMIZER_OPS = {"gd": 2, "sgd": 2, "momentum": 3, "adam": 10}
STEP_OPS = 20
LANCZOS_STEP_OPS = 30
HVP_PASSES = 30
OPERATOR_PASSES = 12
JVP_PASSES = 12
MEMORY_BOUND_SLOWDOWN = {"hessian": 8}
"""Terms whose FLOPs run memory-bound, at flops_per_s / this: the model Hessian's per-point HVPs (matrix-vector
products) and its float64 reorthogonalisation."""
LIMIT_LAYER_OPS = 200
FRESH_ELEMENTS_PER_OP, HEAP_ELEMENTS_PER_OP = 360, 1000
MMAP_THRESHOLD_BYTES = 32 * 2**20
"""A weight gradient made per point costs about an operation per 1000 of its elements (written, squared and
summed: 4.8 ns an element measured on an 8192-wide mlp's kernel trace, 1 thread), per 360 for a tensor over
glibc's largest mmap threshold (32 MiB), mapped afresh each time page by page (13.5 ns on a 16 384-wide one)."""
JOB_OPS = 5000


@dataclass(frozen=True)
class TimeRates:
    """seconds = FLOPs / flops_per_s + dispatched operations × seconds_per_op (module docstring)."""

    flops_per_s: float = FLOPS_PER_S
    seconds_per_op: float = SECONDS_PER_OP


@dataclass(frozen=True)
class Term:
    """One part of the estimate: its name, its value (bytes or FLOPs) and what it counts."""

    name: str
    value: float
    what: str


@dataclass(frozen=True)
class Estimate:
    memory_bytes: int
    flops: float
    memory: tuple[Term, ...]
    work: tuple[Term, ...]
    ops: tuple[Term, ...] = ()
    rates: TimeRates = TimeRates()

    @property
    def dispatches(self) -> float:
        return float(sum(term.value for term in self.ops))

    @property
    def time(self) -> tuple[Term, ...]:
        """Seconds per term: its FLOPs at flops_per_s plus its dispatched operations at seconds_per_op."""
        flops = {term.name: term.value for term in self.work}
        per_op = self.rates.seconds_per_op
        rate = {term.name: self.rates.flops_per_s / MEMORY_BOUND_SLOWDOWN.get(term.name, 1) for term in self.ops}
        return tuple(
            Term(
                term.name,
                flops.get(term.name, 0.0) / rate[term.name] + term.value * per_op,
                f"{flops.get(term.name, 0.0):.3g} FLOPs at {rate[term.name]:.3g} FLOP/s + {term.value:.3g} "
                f"operations at {per_op:.3g} s ({term.what})",
            )
            for term in self.ops
        )

    @property
    def seconds(self) -> float:
        return float(sum(term.value for term in self.time))

    @property
    def time_dominant(self) -> Term:
        return max(self.time, key=lambda term: term.value)

    @property
    def memory_dominant(self) -> Term:
        return max(self.memory, key=lambda term: term.value)

    @property
    def work_dominant(self) -> Term:
        return max(self.work, key=lambda term: term.value)


def format_bytes(size: float) -> str:
    """'260.8 GiB (280012345678 bytes)': binary units for reading, the exact count for comparing."""
    value, unit = float(size), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{int(size)} bytes" if unit == "bytes" else f"{value:.1f} {unit} ({int(size)} bytes)"


@dataclass(frozen=True)
class _Sizes:
    """The spec's counts the formulas read (module docstring)."""

    n: int
    batch: int
    probe: int
    outputs: int
    heads: int
    itemsize: int
    steps: int
    runs: int


def estimate_job(spec: JobSpec, rates: TimeRates = TimeRates()) -> Estimate:
    """The estimate of the module docstring; raises ValueError (naming the field) if the model cannot be planned."""
    prof = forward_profile(spec)
    sizes = _sizes(spec, prof)
    kernel_method, kernel_cost = _kernel_cost(spec, prof, sizes, sizes.probe)
    memory = _memory_terms(spec, prof, sizes, kernel_method, kernel_cost) + _limit_and_curvature_memory(
        spec, prof, sizes
    )
    work = _work_terms(spec, prof, sizes, kernel_method, kernel_cost) + _limit_and_curvature_work(spec, prof, sizes)
    ops = _dispatch_terms(spec, prof, sizes, kernel_method)
    return Estimate(_peak(spec, prof, sizes, memory), float(sum(term.value for term in work)), memory, work, ops, rates)


def _sizes(spec: JobSpec, prof: ForwardProfile) -> _Sizes:
    n = spec.data.n_points()
    training = spec.training
    minibatch = training.optimizer != "gd" and training.batch_size is not None and training.batch_size < n
    kernel = spec.diagnostics.kernel or KernelDiagnostics()
    steps = training.max_steps
    scheduled = min(kernel.log_points(steps), steps) if kernel.schedule == "log" else steps // kernel.every
    return _Sizes(
        n=n,
        batch=training.batch_size if minibatch else n,
        probe=spec.probe_n(),
        outputs=prof.outputs,
        heads=2 if spec.model.output_activation != "identity" else 1,
        itemsize=ITEMSIZE[spec.dtype],
        steps=steps,
        runs=1 + scheduled + 1,
    )


def _kernel_cost(spec: JobSpec, prof: ForwardProfile, sizes: _Sizes, points: int) -> tuple[str, Cost]:
    """The method the worker would use on `points` points (auto: the cost model's choice) and its cost."""
    costs = method_costs(prof.kernel_profile(sizes.itemsize), points, MEMORY_BUDGET_BYTES)
    wanted = (spec.diagnostics.kernel or KernelDiagnostics()).method
    method = cheapest(costs, MEMORY_BUDGET_BYTES) if wanted == "auto" else wanted
    return method, costs[method]


def _memory_terms(spec: JobSpec, prof: ForwardProfile, s: _Sizes, method: str, cost: Cost) -> tuple[Term, ...]:
    b, d, O = s.itemsize, prof.input_elements, s.outputs
    diagnostics, hessian = spec.diagnostics, spec.diagnostics.hessian
    rows = s.probe * O
    along_path = diagnostics.kernel is not None
    saved = len(diagnostics.save_kernels) if along_path else diagnostics.save_kernels.count("init")
    kernel_matrices = s.heads * (1 + along_path + saved) + KERNEL_FACTORS
    weight_copies = 1 + 2 * diagnostics.save_weights
    state = OPTIMIZER_STATE[spec.training.optimizer]
    lanczos = 8 * prof.trainable * (hessian.iterations + 2) + 4 * b * prof.trainable if hessian else 0
    return (
        Term(
            "data",
            GENERATION_COPIES * 8 * s.n * (d + O),
            f"2·8·n·(d + O): {s.n} points × ({d} inputs + {O} targets), two float64 copies while they are made",
        ),
        Term(
            "weights",
            b * (prof.parameters * weight_copies + prof.trainable * (2 + state)),
            f"b·(P·{weight_copies} + p·{2 + state}): {prof.parameters} weights, w₀, gradients"
            f"{', optimiser state' if state else ''}{', weight artifacts' if diagnostics.save_weights else ''}",
        ),
        Term(
            "constants",
            prof.constants(b),
            f"the ONNX model's constant subgraphs, folded once at conversion: {prof.constant_bytes} bytes with floats at "
            f"8 bytes, {prof.constant_elements} of their elements floats at {b}"
            if prof.constant_bytes
            else "no folded constants",
        ),
        Term(
            "activations",
            b * (s.batch * prof.saved + prof.fixed_saved + 2 * s.n * prof.largest),
            f"b·(B·a + a_fix + 2·n·ℓ): a training step on B = {s.batch} examples saving a = {prof.saved} activations each, "
            f"the widest representation ℓ = {prof.largest}"
            + (f", and a_fix = {prof.fixed_saved} elements of the nodes run once per pass" if prof.fixed_saved else ""),
        ),
        Term(
            "kernel",
            b * rows**2 * kernel_matrices + FLOAT64_KERNEL_COPIES * 8 * rows**2,
            f"{kernel_matrices} matrices of (n_p·O)² = {rows}² entries (kernels, Gram factors, artifacts) "
            "and the float64 copies of a spectrum",
        ),
        Term(
            "cotangents",
            max(0.0, cost.peak - b * rows**2),
            f"the {method} kernel method's working set on {s.probe} probe points × {O} outputs",
        ),
        Term(
            "lanczos",
            lanczos,
            f"8·p·(iterations + 2) + 4·b·p: the float64 Lanczos basis of {hessian.iterations} vectors of p = "
            f"{prof.trainable} weights, and the HVP's vectors"
            if hessian
            else "no Hessian",
        ),
    )


def _limit_and_curvature_memory(spec: JobSpec, prof: ForwardProfile, s: _Sizes) -> tuple[Term, ...]:
    """infinite_width, spectrum and loss_hessian of the module docstring (0 when off)."""
    diagnostics, b, p, a, O = spec.diagnostics, s.itemsize, prof.trainable, prof.saved, s.outputs
    limit, live = 0, 0
    if diagnostics.infinite_width is not None:
        live = limit_cost(spec).live
        limit = 8 * s.probe**2 * live + LIMIT_DISTANCE_COPIES * 8 * (s.probe * O) ** 2
    spectrum, wanted = 0, diagnostics.hessian_spectrum
    if wanted is not None:
        per_probe = 8 * p * (wanted.lanczos_steps + 4) + 3 * _spectrum_points(spec, s) * b * a
        together = min(wanted.probes, max(1, MEMORY_BUDGET_BYTES // per_probe))
        spectrum = together * (per_probe + RADEMACHER_COPIES * 8 * p) + HVP_VECTORS * b * p
    split, rows = 0, s.n * O
    if diagnostics.loss_hessian is not None:
        basis = 8 * p * (diagnostics.loss_hessian.iterations + 2) + 3 * b * s.n * a
        kernel = _kernel_cost(spec, prof, s, s.n)[1].peak + FLOAT64_KERNEL_COPIES * 8 * rows**2
        split = 3 * b * p + b * s.n * (a + O) + max(basis, kernel)
    return (
        Term(
            "infinite_width",
            limit,
            f"8·n_p²·{live}: the layer maps' [n_p, n_p, P, P] float64 moments at the largest map, "
            f"n_p = {s.probe} (planner/limit_cost.py), and 3 float64 (n_p·O)² copies of the distance"
            if limit
            else "no infinite-width kernels",
        ),
        Term(
            "spectrum",
            spectrum,
            f"min(probes, budget)·(8·p·(lanczos_steps + 6) + 3·b·N·a) + 6·b·p: the probes run together, each with "
            f"its float64 Lanczos basis and start of p = {p} weights and an HVP's graph over "
            f"N = {_spectrum_points(spec, s)} points, and the HVP's vectors"
            if spectrum
            else "no Hessian spectrum",
        ),
        Term(
            "loss_hessian",
            split,
            f"3·b·p + b·n·(a + O) + max(8·p·(iterations + 2) + 3·b·n·a, kernel): the three operators over "
            f"n = {s.n} training points, a Lanczos norm, and the tangent kernel of n·O = {rows} rows with its eigvalsh"
            if split
            else "no loss-Hessian split",
        ),
    )


def _spectrum_points(spec: JobSpec, s: _Sizes) -> int:
    """The points one HVP of the Hessian spectrum runs over: the training set for the loss, one probe point for the model."""
    return s.n if spec.diagnostics.hessian_spectrum.of == "loss" else 1


def _peak(spec: JobSpec, prof: ForwardProfile, s: _Sizes, memory: tuple[Term, ...]) -> int:
    term = {t.name: t.value for t in memory}
    diagnostics = spec.diagnostics
    on_path = max(
        term["cotangents"] * (diagnostics.kernel is not None),
        term["lanczos"] * (diagnostics.hessian is not None and "schedule" in diagnostics.hessian.at),
        term["loss_hessian"],
    )
    kept = s.itemsize * s.n * (prof.input_elements + s.outputs) + term["weights"] + term["constants"] + term["kernel"]
    phases = max(
        term["activations"] + on_path, term["cotangents"], term["lanczos"], term["spectrum"], term["infinite_width"]
    )
    return int(max(term["data"], kept + phases))


def _work_terms(spec: JobSpec, prof: ForwardProfile, s: _Sizes, method: str, cost: Cost) -> tuple[Term, ...]:
    F, fixed = prof.flops + prof.saved, prof.fixed
    p, O = prof.trainable, s.outputs
    full_set_loss = s.n * F + fixed if s.batch < s.n else 0
    training = s.steps * (3 * (s.batch * F + fixed) + full_set_loss)
    F += fixed  # the other terms: once per example, an upper bound (module docstring)
    rows = s.probe * O
    kernel_runs = s.runs if spec.diagnostics.kernel is not None else 1
    kernel = s.heads * kernel_runs * (cost.flops + 4 / 3 * rows**3)
    hessian = 0.0
    hessian_spec = spec.diagnostics.hessian
    if hessian_spec is not None:
        at = set(hessian_spec.at)
        runs = len(at & {"init", "final"}) + (s.runs if "schedule" in at else 0)
        it = hessian_spec.iterations
        per_output = 3 * F + it * (6 * F + 8 * p) + 4 * it * it * p
        hessian = runs * min(hessian_spec.probe_points, s.probe) * hessian_outputs(hessian_spec, O) * per_output
    path = s.runs * (3 * s.probe * F * spec.diagnostics.linearization_error + 4 * p * spec.diagnostics.weight_change)
    return (
        Term(
            "training",
            training,
            f"{s.steps} steps × 3·B·F with B = {s.batch} examples of F = {prof.flops + prof.saved:.3g} FLOPs"
            + (f", plus 3·F_fix = 3 × {fixed:.3g} FLOPs of nodes run once per pass" if fixed else "")
            + (f", plus the full-set loss on {s.n}" if full_set_loss else ""),
        ),
        Term(
            "kernel",
            kernel,
            f"{s.heads * kernel_runs} tangent kernels ({method}) on {s.probe} probe points × {O} outputs",
        ),
        Term(
            "hessian",
            hessian,
            f"Lanczos ({hessian_spec.iterations} HVPs) per probe point and output" if hessian_spec else "no Hessian",
        ),
        Term("path", path, f"linearization error and weight change at {s.runs} steps"),
        Term(
            "constants",
            prof.folding_flops,
            "folding the ONNX model's constant subgraphs, once at conversion"
            if prof.folding_flops
            else "no folded constants",
        ),
        Term(
            "sensitivity",
            2 * s.probe * F * (1 + 2 * O) * spec.diagnostics.layer_sensitivity,
            "layer sensitivity at w₀ and at the end: a forward and O backward passes on the probe points"
            if spec.diagnostics.layer_sensitivity
            else "no layer sensitivity",
        ),
        Term(
            "kernel_trace",
            s.probe * (F * (1 + 2 * O) + 4 * O * p),
            f"the kernel's trace per weight tensor (run warnings): a forward and O backward passes per probe point, "
            f"{s.probe} points, and the squares of each output's gradient",
        ),
    )


def _limit_and_curvature_work(spec: JobSpec, prof: ForwardProfile, s: _Sizes) -> tuple[Term, ...]:
    """infinite_width, hessian_spectrum and loss_hessian of the module docstring (0 when off)."""
    diagnostics, F, p, O = spec.diagnostics, prof.flops + prof.saved + prof.fixed, prof.trainable, s.outputs
    limit = 0.0
    if diagnostics.infinite_width is not None:
        cost, final_kernel = (
            limit_cost(spec),
            0.0 if diagnostics.kernel is not None else _kernel_cost(spec, prof, s, s.probe)[1].flops,
        )
        limit = s.probe**2 * cost.pair_flops + s.probe * cost.point_flops + 4 / 3 * s.probe**3 + final_kernel
    spectrum, hvps, wanted = 0.0, spectrum_hvps(spec), diagnostics.hessian_spectrum
    if wanted is not None:
        steps = wanted.lanczos_steps
        spectrum = hvps * (6 * _spectrum_points(spec, s) * F + 8 * p + 4 * steps * p)
    split, rows = 0.0, s.n * O
    if diagnostics.loss_hessian is not None:
        it = diagnostics.loss_hessian.iterations
        norms = 3 * (it * (6 * s.n * F + 8 * p) + 4 * it * it * p)
        split = s.runs * (norms + _kernel_cost(spec, prof, s, s.n)[1].flops + 4 / 3 * rows**3)
    return (
        Term(
            "infinite_width",
            limit,
            f"the layer maps on n_p = {s.probe} probe points: n_p²·pair + n_p·point FLOPs "
            "(planner/limit_cost.py), λ_min(Θ∞)" + ("" if diagnostics.kernel is not None else ", the final kernel")
            if limit
            else "no infinite-width kernels",
        ),
        Term(
            "hessian_spectrum",
            spectrum,
            f"{hvps} HVPs (probes and block norms × lanczos_steps per Hessian, at "
            f"{len(wanted.at)} points of the run) and their reorthogonalisation"
            if wanted
            else "no Hessian spectrum",
        ),
        Term(
            "loss_hessian",
            split,
            f"{s.runs} scheduled steps × (3 Lanczos norms of ≤ {diagnostics.loss_hessian.iterations} "
            f"HVPs over n = {s.n} points + the n·O = {rows}-row kernel and its eigvalsh)"
            if split
            else "no loss-Hessian split",
        ),
    )


def hessian_outputs(wanted: HessianDiagnostics, outputs: int) -> int:
    """O_h: the outputs per probe point the model Hessian measures, of the model's O."""
    return min(wanted.outputs or outputs, outputs)


def spectrum_hvps(spec: JobSpec) -> int:
    """HVPs of diagnostics.hessian_spectrum at most (every Lanczos run to lanczos_steps): |at|·H·R·S with
    H = points·O Hessians of the model or 1 of the loss, R = probes + parameter groups (with block_norms)."""
    wanted = spec.diagnostics.hessian_spectrum
    if wanted is None:
        return 0
    hessians = 1 if wanted.of == "loss" else min(wanted.points, spec.probe_n()) * (spec.model.output_dim or 1)
    runs = wanted.probes + (_parameter_groups(spec) if wanted.block_norms else 0)
    return len(wanted.at) * hessians * runs * wanted.lanczos_steps


def _parameter_groups(spec: JobSpec) -> int:
    """The layers that own trainable weights (engine/curvature/operators.parameter_groups), readout included."""
    model = spec.model
    input_shape = spec.image_shape() or (input_dim(spec.data),)
    if model.kind == "onnx":  # no layer plan: the weight layers its upload's profile lists
        return max(1, len(forward_profile(spec).layers))
    graph = as_graph(model, input_shape)
    hidden = sum(_weight_layers(planned) for planned in plan_model_graph(graph, input_shape).layers)
    return hidden + model.train_output_layer


def _weight_layers(planned: PlannedLayer) -> int:
    if planned.branch:
        return sum(_weight_layers(inner) for inner in planned.branch) + (planned.projection_stride is not None)
    return int(planned.parameters > 0)


def _dispatch_terms(spec: JobSpec, prof: ForwardProfile, s: _Sizes, method: str) -> tuple[Term, ...]:
    """Framework operations dispatched per work term, whatever their size (module docstring, "time")."""
    D, W, O, diagnostics = prof.ops, prof.tensors, s.outputs, spec.diagnostics
    training_spec = s.steps * (
        3 * D + OPTIMIZER_OPS[spec.training.optimizer] * W + STEP_OPS + D * (s.batch < s.n) + _step_traffic_ops(prof, s)
    )
    kernel_runs = s.runs if diagnostics.kernel is not None else 1
    kernel = kernel_runs * _kernel_ops(prof, method, s.probe, O, s.itemsize)
    hessian, wanted = 0.0, diagnostics.hessian
    if wanted is not None:
        at = set(wanted.at)
        runs = len(at & {"init", "final"}) + (s.runs if "schedule" in at else 0)
        lanczos_runs = min(wanted.probe_points, s.probe) * hessian_outputs(wanted, O)
        together = max(
            1, (MEMORY_BUDGET_BYTES // 2) // (8 * prof.trainable * (min(wanted.iterations, prof.trainable) + 2))
        )
        hessian = (
            runs
            * wanted.iterations
            * (math.ceil(lanczos_runs / together) * HVP_PASSES * D + LANCZOS_STEP_OPS * lanczos_runs)
        )
    path = s.runs * (
        D + JVP_PASSES * D * diagnostics.linearization_error + 4 * W * diagnostics.weight_change + STEP_OPS
    )
    sensitivity = 2 * ((1 + 2 * O) * D + O * W) if diagnostics.layer_sensitivity else 0
    per_point_gradient = _weight_traffic_ops(prof, s.itemsize)
    kernel_trace = s.probe * ((1 + 2 * O) * D + 2 * O * W + O * per_point_gradient)
    limit = LIMIT_LAYER_OPS * W if diagnostics.infinite_width is not None else 0
    if diagnostics.infinite_width is not None and diagnostics.kernel is None:
        limit += _kernel_ops(prof, method, s.probe, O, s.itemsize)
    spectrum, split = 0.0, 0.0
    if diagnostics.hessian_spectrum is not None:
        spectrum = _spectrum_calls(spec, prof, s) * (OPERATOR_PASSES * D + LANCZOS_STEP_OPS)
    if diagnostics.loss_hessian is not None:
        it = diagnostics.loss_hessian.iterations
        split = s.runs * (
            3 * it * (OPERATOR_PASSES * D + LANCZOS_STEP_OPS)
            + _kernel_ops(prof, _kernel_cost(spec, prof, s, s.n)[0], s.n, O, s.itemsize)
        )
    return (
        Term(
            "training",
            training_spec,
            f"{s.steps} steps × (3·D + optimiser + element traffic) with D = {D} operations "
            f"per forward pass and {_step_traffic_ops(prof, s)} operations' worth of activation and weight elements",
        ),
        Term("kernel", kernel, f"{kernel_runs} kernel passes ({method}) of (1 + 2·O) forward passes or their chunks"),
        Term(
            "hessian",
            hessian,
            "Lanczos steps × (vmapped HVP calls of 30 passes, as many bases at once as half the "
            "budget holds, + the runs' own steps)"
            if wanted
            else "no Hessian",
        ),
        Term("path", path, f"a forward, the linearization error's jvp and the weight change at {s.runs} steps"),
        Term(
            "sensitivity",
            sensitivity,
            "layer sensitivity at w₀ and at the end: 1 + 2·O passes" if sensitivity else "no layer sensitivity",
        ),
        Term(
            "kernel_trace",
            kernel_trace,
            f"tr K_g(w₀) per weight tensor: 1 + 2·O passes per probe point, {s.probe} points",
        ),
        Term(
            "infinite_width",
            limit,
            "the layer maps, a few hundred operations per layer" if limit else "no infinite-width kernels",
        ),
        Term(
            "hessian_spectrum",
            spectrum,
            "vmapped HVP calls (probes batched) of 12 passes" if spectrum else "no Hessian spectrum",
        ),
        Term(
            "loss_hessian",
            split,
            "3 Lanczos norms of HVP calls and the training set's kernel per run" if split else "no loss-Hessian split",
        ),
        Term("constants", D + 10 * W + JOB_OPS, "building the network and the job's fixed work"),
    )


def _weight_traffic_ops(prof: ForwardProfile, itemsize: int) -> int:
    """One pass over the p trainable weights' elements in operations: per FRESH_ELEMENTS_PER_OP elements of the
    weight tensors over MMAP_THRESHOLD_BYTES (mapped afresh each time they are made), per HEAP_ELEMENTS_PER_OP of the rest."""
    fresh = sum(
        layer.fan_in * layer.out for layer in prof.layers if layer.fan_in * layer.out * itemsize > MMAP_THRESHOLD_BYTES
    )
    return math.ceil(fresh / FRESH_ELEMENTS_PER_OP) + math.ceil((prof.trainable - fresh) / HEAP_ELEMENTS_PER_OP)


def _step_traffic_ops(prof: ForwardProfile, s: _Sizes) -> int:
    """A training step's element traffic in operations: the B·a saved activation elements (made forward, read
    and made again backward; per FRESH_ELEMENTS_PER_OP when the largest activation, B·ℓ elements, is over
    MMAP_THRESHOLD_BYTES, else per HEAP_ELEMENTS_PER_OP) and one pass over the weights (their gradients and update).
    Wide layers on few input features are this, not FLOPs: a [16, 10⁶] tanh layer on 8 features does 2.6·10⁸
    FLOPs a step forward and backward and ran 0.45 s a step (1 thread, docs/benchmarks.md "Time estimate")."""
    elements = s.batch * prof.saved + (s.n * prof.saved if s.batch < s.n else 0)
    fresh = s.batch * prof.largest * s.itemsize > MMAP_THRESHOLD_BYTES
    return math.ceil(elements / (FRESH_ELEMENTS_PER_OP if fresh else HEAP_ELEMENTS_PER_OP)) + _weight_traffic_ops(
        prof, s.itemsize
    )


def _kernel_ops(prof: ForwardProfile, method: str, n: int, O: int, itemsize: int) -> float:
    """Dispatched operations of one kernel pass on n points: structured: a forward and O backward passes,
    a few per covered layer and output, and the fallback's vmapped chunks; jacobian: one vmapped call;
    ntk_vp: a vjp and a vmapped (vjp, jvp) call per block of columns."""
    D, passes_1 = prof.ops, 1 + 2 * O
    if method == "jacobian":
        return passes_1 * D
    if method == "ntk_vp":
        profile = prof.kernel_profile(itemsize)
        block = max(1, min(n * O, MEMORY_BUDGET_BYTES // ((3 * profile.p + 8 * n * profile.activations) * itemsize)))
        return D * (1 + 3 * math.ceil(n * O / block))
    ops = passes_1 * D + 10 * O * len(prof.layers)
    if prof.fallback:
        profile = prof.kernel_profile(itemsize)
        q, m = panel_and_chunk(n, O, prof.fallback, itemsize, profile.saved_bytes, MEMORY_BUDGET_BYTES)
        ops += math.ceil(passes(n, q) * n / m) * passes_1 * D
    return ops


def _spectrum_calls(spec: JobSpec, prof: ForwardProfile, s: _Sizes) -> int:
    """Vmapped HVP calls of the Hessian spectrum: per Hessian and point of the run, ⌈probes / r⌉·S for the
    quadrature (r probes together) and S per parameter group's norm."""
    wanted, b, p = spec.diagnostics.hessian_spectrum, s.itemsize, prof.trainable
    per_probe = 8 * p * (wanted.lanczos_steps + 4) + 3 * _spectrum_points(spec, s) * b * prof.saved
    together = min(wanted.probes, max(1, MEMORY_BUDGET_BYTES // per_probe))
    hessians = 1 if wanted.of == "loss" else min(wanted.points, s.probe) * s.outputs
    groups = _parameter_groups(spec) if wanted.block_norms else 0
    return len(wanted.at) * hessians * (math.ceil(wanted.probes / together) + groups) * wanted.lanczos_steps

"""Recurrent layers: LSTM, GRU, RNN (ONNX gate order and layouts), as explicit loops over the time steps.

W, R, B (and LSTM's peepholes P) are used exactly as the ONNX initializers hold them, so they
are the trainable weights and gradients reach them:

    X  [seq, batch, input] (layout 0) or [batch, seq, input] (layout 1)
    W  [dirs, G·H, input]   R [dirs, G·H, H]   B [dirs, 2·G·H] = (Wb, Rb)   G gates: LSTM i o f c, GRU z r h, RNN one
    Y  [seq, dirs, batch, H] (layout 0) or [batch, seq, dirs, H];   Y_h, Y_c [dirs, batch, H] (layout 0) or [batch, dirs, H]

The reverse direction reads X from the last step back; its Y[t] is the state after X[t].
`clip` clamps every gate's pre-activation to [−clip, clip]. sequence_lens must be a constant
with one length for every sequence (a shorter common length L reads X[:L], and Y is 0 after it).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ntklab.engine.nets.onnx_ops.registry import Node, OnnxConversionError, Run, operator

ACTIVATION_FUNCTIONS = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu}
DIRECTIONS = ("forward", "reverse", "bidirectional")


def _common(node: Node, defaults: tuple[str, ...]):
    """(directions, the activations of each direction, clip, the common sequence length or None) of a recurrent node."""
    direction = node.attr("direction", "forward")
    if direction not in DIRECTIONS:
        raise node.refuse(f"direction={direction} is not supported ({', '.join(DIRECTIONS)})")
    dirs = 2 if direction == "bidirectional" else 1
    names = [n.decode() if isinstance(n, bytes) else n for n in node.attr("activations", list(defaults) * dirs)]
    if len(names) == len(defaults) and dirs == 2:
        names = names * 2
    if len(names) != len(defaults) * dirs:
        raise node.refuse(
            f"activations has {len(names)} entries, {node.proto.op_type} {direction} needs {len(defaults) * dirs}"
        )
    for name in names:
        if name.lower() not in ACTIVATION_FUNCTIONS:
            raise node.refuse(f"activation {name} is not supported (Relu, Sigmoid, Tanh)")
    functions = [ACTIVATION_FUNCTIONS[name.lower()] for name in names]
    per_direction = [functions[i * len(defaults) : (i + 1) * len(defaults)] for i in range(dirs)]
    clip = node.attr("clip")
    lengths = node.known_array(4, "sequence_lens")
    length = None
    if lengths is not None and lengths.size:
        if len(set(int(v) for v in lengths.reshape(-1))) != 1:
            raise node.refuse("sequence_lens with different lengths is not supported (pad the sequences to one length)")
        length = int(lengths.reshape(-1)[0])
    return direction, per_direction, clip, length


def _clipped(clip: float | None):
    if clip is None:
        return lambda v: v
    return lambda v: torch.clamp(v, -clip, clip)


def _run_recurrence(
    node_type: str,
    direction: str,
    layout: int,
    hidden_size: int | None,
    length: int | None,
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    h0: Tensor,
    c0: Tensor | None,
    cell,
) -> tuple[Tensor, ...]:
    """Y, Y_h (and Y_c when c0 is not None: LSTM) of `cell(d, x_t Wᵀ + Wb, h, c) -> (h, c)` run over the steps of x
    for each direction d (the input projections of all steps computed at once; Wb the first half of B)."""
    dirs = 2 if direction == "bidirectional" else 1
    if w.shape[0] != dirs:
        raise OnnxConversionError(
            f"{node_type} direction={direction} needs W with {dirs} direction(s), not {w.shape[0]}"
        )
    if layout:
        x = x.transpose(0, 1)
        h0 = h0.transpose(0, 1)
        c0 = None if c0 is None else c0.transpose(0, 1)
    steps = x.shape[0]
    if length is not None:
        if length > steps:
            raise OnnxConversionError(f"{node_type} sequence_lens {length} exceeds the sequence length {steps}")
        x = x[:length]
    ys, hs, cs = [], [], []
    for d in range(w.shape[0]):
        h, c = h0[d], None if c0 is None else c0[d]
        projected = x @ w[d].T
        if b is not None:
            projected = projected + b[d, : w.shape[1]]
        order = range(x.shape[0]) if d == 0 and direction != "reverse" else range(x.shape[0] - 1, -1, -1)
        outputs = [None] * x.shape[0]
        for t in order:
            h, c = cell(d, projected[t], h, c)
            outputs[t] = h
        ys.append(torch.stack(outputs) if outputs else x.new_zeros((0,) + tuple(h.shape)))
        hs.append(h)
        cs.append(c)
    y = torch.stack(ys, dim=1)
    if hidden_size is not None and y.shape[-1] != hidden_size:
        raise OnnxConversionError(f"{node_type} hidden_size {hidden_size} disagrees with R's {y.shape[-1]}")
    if y.shape[0] < steps:  # the steps after a shorter sequence_lens are 0
        y = torch.cat([y, y.new_zeros((steps - y.shape[0],) + tuple(y.shape[1:]))])
    outputs = [y, torch.stack(hs)] + ([torch.stack(cs)] if c0 is not None else [])
    if layout:
        outputs = [outputs[0].permute(2, 0, 1, 3)] + [o.transpose(0, 1) for o in outputs[1:]]
    return tuple(outputs)


def _initial(state: Tensor | None, dirs: int, batch: int, hidden: int, like: Tensor, layout: int) -> Tensor:
    if state is not None:
        return state
    shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    return like.new_zeros(shape)


def _batch(x: Tensor, layout: int) -> int:
    return x.shape[0] if layout else x.shape[1]


@operator("LSTM", "activations", "clip", "direction", "hidden_size", "input_forget", "layout", outputs=3)
def lstm(node: Node) -> Run:
    """C ← f ⊙ C + i ⊙ g(XW꜀ᵀ + HR꜀ᵀ + b꜀), H ← o ⊙ h(C); gates i, f = σ(XWᵀ + HRᵀ + P ⊙ C + b) of the old C, o of the new (order i o f c); outputs Y, Y_h, Y_c."""
    direction, activations, clip, length = _common(node, ("Sigmoid", "Tanh", "Tanh"))
    if node.attr("input_forget", 0):
        raise node.refuse("input_forget=1 is not supported")
    layout, hidden_size, clipped = node.attr("layout", 0), node.attr("hidden_size"), _clipped(clip)

    def run(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        hidden = r.shape[-1]

        def cell(d, xw, h, c):
            f, g, act_h = activations[d]
            gates = xw + h @ r[d].T
            if b is not None:
                gates = gates + b[d, 4 * hidden :]
            i, o, fg, cand = gates.split(hidden, dim=-1)
            if p is not None:
                p_i, p_o, p_f = p[d].split(hidden)
                i, fg = i + p_i * c, fg + p_f * c
            i, fg, cand = f(clipped(i)), f(clipped(fg)), g(clipped(cand))
            c = fg * c + i * cand
            if p is not None:
                o = o + p_o * c
            return f(clipped(o)) * act_h(c), c

        h0 = _initial(initial_h, w.shape[0], _batch(x, layout), hidden, x, layout)
        c0 = _initial(initial_c, w.shape[0], _batch(x, layout), hidden, x, layout)
        return _run_recurrence("LSTM", direction, layout, hidden_size, length, x, w, b, h0, c0, cell)

    return run


@operator("GRU", "activations", "clip", "direction", "hidden_size", "layout", "linear_before_reset", outputs=2)
def gru(node: Node) -> Run:
    """z, r = f(XWᵀ + HRᵀ + b), h̃ = g(XWₕᵀ + (r ⊙ H)Rₕᵀ + b) (or r ⊙ (HRₕᵀ + Rbₕ) when linear_before_reset), H ← (1 − z) ⊙ h̃ + z ⊙ H."""
    direction, activations, clip, length = _common(node, ("Sigmoid", "Tanh"))
    layout, hidden_size, clipped = node.attr("layout", 0), node.attr("hidden_size"), _clipped(clip)
    linear_before_reset = bool(node.attr("linear_before_reset", 0))

    def run(x, w, r, b=None, sequence_lens=None, initial_h=None):
        hidden = r.shape[-1]

        def cell(d, xw, h, c):
            f, g = activations[d]
            r_zr, r_h = r[d, : 2 * hidden], r[d, 2 * hidden :]
            hr = h @ r_zr.T
            if b is not None:
                hr = hr + b[d, 3 * hidden : 5 * hidden]
            x_z, x_r, x_h = xw.split(hidden, dim=-1)
            h_z, h_r = hr.split(hidden, dim=-1)
            z, reset = f(clipped(x_z + h_z)), f(clipped(x_r + h_r))
            hh = (h if linear_before_reset else reset * h) @ r_h.T
            if b is not None:
                hh = hh + b[d, 5 * hidden :]
            cand = g(clipped(x_h + (reset * hh if linear_before_reset else hh)))
            return (1 - z) * cand + z * h, None

        h0 = _initial(initial_h, w.shape[0], _batch(x, layout), hidden, x, layout)
        return _run_recurrence("GRU", direction, layout, hidden_size, length, x, w, b, h0, None, cell)

    return run


@operator("RNN", "activations", "clip", "direction", "hidden_size", "layout", outputs=2)
def rnn(node: Node) -> Run:
    """H ← f(XWᵀ + HRᵀ + Wb + Rb) (f = tanh by default); outputs Y, Y_h."""
    direction, activations, clip, length = _common(node, ("Tanh",))
    layout, hidden_size, clipped = node.attr("layout", 0), node.attr("hidden_size"), _clipped(clip)

    def run(x, w, r, b=None, sequence_lens=None, initial_h=None):
        hidden = r.shape[-1]

        def cell(d, xw, h, c):
            pre = xw + h @ r[d].T
            if b is not None:
                pre = pre + b[d, hidden:]
            return activations[d][0](clipped(pre)), None

        h0 = _initial(initial_h, w.shape[0], _batch(x, layout), hidden, x, layout)
        return _run_recurrence("RNN", direction, layout, hidden_size, length, x, w, b, h0, None, cell)

    return run

"""LSTM, GRU, RNN against onnx's reference evaluator (float64; every direction and layout, with and without B, initial
states and peepholes, GRU's linear_before_reset 0 and 1), against the spec's equations for the activations and clip
the reference ignores, against torch.nn.LSTM / GRU / RNN exported by torch.onnx, their gradients against finite
differences, per-point vmap, and refusals."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import torch
from onnx import helper
from torch import nn

from ntklab.engine.nets.onnx_ops.registry import OnnxConversionError, table
from ntklab.onnx_export import export_module
from tests.engine.onnx_ops.reference import (
    assert_gradient_matches_finite_differences,
    assert_matches_reference,
    assert_vmap_per_point_matches,
    converted,
    graph_model,
    single_node,
)

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": ("y", "y_h", "y_c"), "GRU": ("y", "y_h"), "RNN": ("y", "y_h")}
SEQ, BATCH, INPUT, HIDDEN = 4, 2, 3, 2


def recurrent_case(
    op: str,
    seed: int,
    direction: str,
    layout: int,
    *,
    bias: bool,
    initial: bool,
    peepholes: bool = False,
    seq: int = SEQ,
    batch: int = BATCH,
):
    """x, the node's inputs and initializers (W, R, optional B, initial_h, initial_c, P) for a random recurrent node."""
    rng = np.random.default_rng(seed)
    dirs, gates = (2 if direction == "bidirectional" else 1), GATES[op]
    x = rng.standard_normal((batch, seq, INPUT) if layout else (seq, batch, INPUT))
    inits = {
        "W": rng.standard_normal((dirs, gates * HIDDEN, INPUT)) / 2,
        "R": rng.standard_normal((dirs, gates * HIDDEN, HIDDEN)) / 2,
    }
    inputs = ["x", "W", "R", "", "", "", "", ""]
    if bias:
        inits["B"], inputs[3] = rng.standard_normal((dirs, 2 * gates * HIDDEN)) / 2, "B"
    state_shape = (batch, dirs, HIDDEN) if layout else (dirs, batch, HIDDEN)
    if initial:
        inits["H0"], inputs[5] = rng.standard_normal(state_shape), "H0"
        if op == "LSTM":
            inits["C0"], inputs[6] = rng.standard_normal(state_shape), "C0"
    if peepholes:
        inits["P"], inputs[7] = rng.standard_normal((dirs, 3 * HIDDEN)) / 2, "P"
    while inputs[-1] == "":
        inputs.pop()
    return x, inputs, inits


def recurrent_model(op, x, inputs, inits, output="y", **attributes):
    model = single_node(op, inputs, x, inits, opset=14, outputs=OUTPUTS[op], hidden_size=HIDDEN, **attributes)
    model.graph.output[0].name = output
    return model


REFERENCE_CASES = [
    (op, direction, layout, bias, initial)
    for op in ("LSTM", "GRU", "RNN")
    for direction in ("forward", "reverse", "bidirectional")
    for layout, bias, initial in ((0, True, True), (1, False, True), (0, False, False), (1, True, False))
]


@pytest.mark.parametrize("op, direction, layout, bias, initial", REFERENCE_CASES)
def test_recurrent_outputs_match_the_reference(op, direction, layout, bias, initial):
    seed = REFERENCE_CASES.index((op, direction, layout, bias, initial))
    x, inputs, inits = recurrent_case(
        op, seed, direction, layout, bias=bias, initial=initial, peepholes=op == "LSTM" and bias
    )
    for output in OUTPUTS[op]:
        assert_matches_reference(recurrent_model(op, x, inputs, inits, output, direction=direction, layout=layout), x)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset_matches_the_reference(direction, linear_before_reset):
    x, inputs, inits = recurrent_case("GRU", 7 + linear_before_reset, direction, 0, bias=True, initial=True)
    for output in OUTPUTS["GRU"]:
        model = recurrent_model(
            "GRU", x, inputs, inits, output, direction=direction, linear_before_reset=linear_before_reset
        )
        assert_matches_reference(model, x)


# ---- activations and clip, which onnx's reference ignores, against the spec's equations


ACT = {"Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Tanh": np.tanh, "Relu": lambda v: np.maximum(v, 0)}


def spec_recurrence(op, x, inits, direction, activations, clip, linear_before_reset=0):
    """Y, Y_h (, Y_c) of the spec's equations, layout 0, step by step in numpy."""
    dirs, hidden, gates = inits["W"].shape[0], HIDDEN, GATES[op]
    per = len(activations) // dirs
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    ys, hs, cs = [], [], []
    for d in range(dirs):
        f = [ACT[a] for a in activations[d * per : (d + 1) * per]]
        w, r = inits["W"][d], inits["R"][d]
        b = inits.get("B", np.zeros((dirs, 2 * gates * hidden)))[d]
        wb, rb = b[: gates * hidden], b[gates * hidden :]
        p = inits.get("P", np.zeros((dirs, 3 * hidden)))[d]
        h = inits["H0"][d] if "H0" in inits else np.zeros((x.shape[1], hidden))
        c = inits["C0"][d] if "C0" in inits else np.zeros((x.shape[1], hidden))
        out = [None] * len(x)
        reverse = direction == "reverse" or d == 1
        for t in range(len(x) - 1, -1, -1) if reverse else range(len(x)):
            xw, hr = x[t] @ w.T + wb, h @ r.T + rb
            if op == "RNN":
                h = f[0](cl(xw + hr))
            elif op == "GRU":
                z, rr = (
                    f[0](cl(xw[:, :hidden] + hr[:, :hidden])),
                    f[0](cl(xw[:, hidden : 2 * hidden] + hr[:, hidden : 2 * hidden])),
                )
                rh = r[2 * hidden :]
                pre = (
                    xw[:, 2 * hidden :] + rr * hr[:, 2 * hidden :]
                    if linear_before_reset
                    else xw[:, 2 * hidden :] + (rr * h) @ rh.T + rb[2 * hidden :]
                )
                h = (1 - z) * f[1](cl(pre)) + z * h
            else:
                g = xw + hr
                i = f[0](cl(g[:, :hidden] + p[:hidden] * c))
                fg = f[0](cl(g[:, 2 * hidden : 3 * hidden] + p[2 * hidden :] * c))
                c = fg * c + i * f[1](cl(g[:, 3 * hidden :]))
                h = f[0](cl(g[:, hidden : 2 * hidden] + p[hidden : 2 * hidden] * c)) * f[2](c)
            out[t] = h
        ys.append(np.stack(out))
        hs.append(h)
        cs.append(c)
    result = (np.stack(ys, axis=1), np.stack(hs))
    return result + (np.stack(cs),) if op == "LSTM" else result


ACTIVATION_CASES = [
    ("LSTM", "forward", ["Tanh", "Relu", "Sigmoid"], None),
    ("LSTM", "bidirectional", ["Sigmoid", "Tanh", "Tanh", "Relu", "Sigmoid", "Tanh"], 0.7),
    ("LSTM", "reverse", ["Sigmoid", "Tanh", "Tanh"], 0.5),
    ("GRU", "forward", ["Relu", "Tanh"], 0.6),
    ("GRU", "bidirectional", ["Sigmoid", "Relu", "Tanh", "Sigmoid"], None),
    ("RNN", "forward", ["Relu"], 0.4),
    ("RNN", "bidirectional", ["Sigmoid", "Relu"], 0.5),
    ("RNN", "reverse", ["Tanh"], 0.3),
]
"""clip as written: the converter reads a float attribute as the shortest decimal of its float32 (0.7, not 0.69999999)."""


@pytest.mark.parametrize("op, direction, activations, clip", ACTIVATION_CASES)
def test_activations_and_clip_follow_the_spec_equations(op, direction, activations, clip):
    x, inputs, inits = recurrent_case(
        op,
        20 + ACTIVATION_CASES.index((op, direction, activations, clip)),
        direction,
        0,
        bias=True,
        initial=True,
        peepholes=op == "LSTM",
    )
    x = 2 * x  # pre-activations past the clip
    attributes = {"direction": direction, "activations": activations} | ({} if clip is None else {"clip": clip})
    for linear_before_reset in [0, 1] if op == "GRU" else [0]:
        extra = {"linear_before_reset": linear_before_reset} if op == "GRU" else {}
        expected = spec_recurrence(op, x, inits, direction, activations, clip, linear_before_reset)
        for output, want in zip(OUTPUTS[op], expected):
            got = (
                converted(recurrent_model(op, x, inputs, inits, output, **attributes, **extra))(torch.as_tensor(x))
                .detach()
                .numpy()
            )
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_default_activations_written_out_and_per_direction_once_are_the_defaults():
    x, inputs, inits = recurrent_case("LSTM", 30, "bidirectional", 0, bias=True, initial=True)
    model = recurrent_model(
        "LSTM", x, inputs, inits, direction="bidirectional", activations=["sigmoid", "tanh", "tanh"]
    )
    assert_matches_reference(model, x)


def test_a_common_sequence_length_shorter_than_x_reads_its_prefix_and_zeros_the_rest():
    x, inputs, inits = recurrent_case("GRU", 31, "bidirectional", 0, bias=True, initial=True)
    inputs = inputs[:4] + ["lens"] + inputs[5:]
    lengths = {"lens": np.full(BATCH, 3, dtype=np.int32)}
    for output in OUTPUTS["GRU"]:
        model = recurrent_model("GRU", x, inputs, inits | lengths, output, direction="bidirectional")
        got = converted(model)(torch.as_tensor(x)).detach().numpy()
        want = spec_recurrence("GRU", x[:3], inits, "bidirectional", ["Sigmoid", "Tanh"] * 2, None)[
            OUTPUTS["GRU"].index(output)
        ]
        if output == "y":
            want = np.concatenate([want, np.zeros((1,) + want.shape[1:])])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    full = recurrent_model(
        "GRU", x, inputs, inits | {"lens": np.full(BATCH, SEQ, dtype=np.int32)}, direction="bidirectional"
    )
    assert_matches_reference(full, x)


# ---- gradients and vmap


@pytest.mark.parametrize(
    "op, direction, layout", [("LSTM", "bidirectional", 0), ("GRU", "reverse", 1), ("RNN", "bidirectional", 1)]
)
def test_recurrent_gradient_in_x_and_every_weight(op, direction, layout):
    x, inputs, inits = recurrent_case(op, 40, direction, layout, bias=True, initial=True, peepholes=op == "LSTM", seq=3)
    assert_gradient_matches_finite_differences(
        recurrent_model(op, x, inputs, inits, direction=direction, layout=layout), x
    )


@pytest.mark.parametrize(
    "op, direction, layout",
    [("LSTM", "bidirectional", 0), ("GRU", "reverse", 1), ("RNN", "bidirectional", 0), ("LSTM", "forward", 1)],
)
def test_recurrent_per_point_vmap(op, direction, layout):
    """The points are the batch: x [batch, seq, input], through a Transpose for layout 0; no initial states (of one batch size)."""
    x, inputs, inits = recurrent_case(op, 41, direction, 1, bias=True, initial=False, peepholes=op == "LSTM")
    for index, output in enumerate(OUTPUTS[op]):
        outputs = [f"o{i}" if i != index else output for i in range(len(OUTPUTS[op]))]
        node = helper.make_node(
            op,
            ["xt" if layout == 0 else "x"] + inputs[1:],
            outputs,
            hidden_size=HIDDEN,
            direction=direction,
            layout=layout,
        )
        nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2])] if layout == 0 else []
        if (
            layout == 0
        ):  # back to the batch first: Y [seq, dirs, batch, H] → [batch, …], Y_h, Y_c [dirs, batch, H] → [batch, …]
            nodes += [
                node,
                helper.make_node("Transpose", [output], ["out"], perm=[2, 0, 1, 3] if output == "y" else [1, 0, 2]),
            ]
        else:
            nodes += [node, helper.make_node("Identity", [output], ["out"])]
        assert_vmap_per_point_matches(graph_model(nodes, x, inits, opset=14, output="out"), x)


# ---- torch.nn.LSTM / GRU / RNN through torch.onnx


class LastStep(nn.Module):
    """A batch-first recurrent net whose last step's output goes through a Linear."""

    def __init__(self, cell, layers: int, bidirectional: bool, **options):
        super().__init__()
        self.rnn = cell(INPUT, 4, num_layers=layers, batch_first=True, bidirectional=bidirectional, **options)
        self.fc = nn.Linear(4 * (2 if bidirectional else 1), 2)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


def exported(module: nn.Module, x: torch.Tensor):
    buffer = io.BytesIO()
    torch.onnx.export(
        module, (x,), buffer, dynamo=False, input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}}
    )
    return onnx.load_from_string(buffer.getvalue())


def without_initial_state_subgraph(model):
    """The exporter builds the zero initial states from Shape/ConstantOfShape/Slice; where the operator table lacks
    one of those, drop the states (an omitted initial state is zero by the spec) and the nodes only they used."""
    graph = model.graph
    for node in graph.node:
        if node.op_type in GATES:
            for index in range(5, len(node.input)):
                node.input[index] = ""
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    changed = True
    while changed:
        keep = [node for node in graph.node if any(name in used for name in node.output)]
        changed = len(keep) != len(graph.node)
        del graph.node[:]
        graph.node.extend(keep)
        used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    return model


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("sdk", [False, True], ids=["torch.onnx.export", "ntklab.export_module"])
@pytest.mark.parametrize(
    "cell, layers, bidirectional, options",
    [
        (nn.LSTM, 1, False, {}),
        (nn.LSTM, 2, True, {}),
        (nn.GRU, 1, True, {}),
        (nn.GRU, 2, False, {}),
        (nn.RNN, 2, True, {}),
        (nn.RNN, 1, False, {"nonlinearity": "relu"}),
    ],
)
def test_torch_recurrent_modules_exported_to_onnx_convert_to_the_same_function(
    cell, layers, bidirectional, options, sdk
):
    """torch.onnx.export's defaults fold W, R, B into initializers in ONNX gate order; the SDK's export keeps torch's
    weights as the initializers and slices them into W, R, B in the graph. Both are the module to 1e-12."""
    torch.manual_seed(layers + 2 * bidirectional)
    module = LastStep(cell, layers, bidirectional, **options).double().eval()
    x = torch.randn(3, 5, INPUT, dtype=torch.float64)
    model = onnx.load_from_string(export_module(module, x)) if sdk else exported(module, x)
    missing = {node.op_type for node in model.graph.node} - set(table())
    if missing and sdk:
        pytest.skip(f"the operator table lacks {sorted(missing)}")
    if missing:
        model = without_initial_state_subgraph(model)
    net = converted(model)
    # every torch weight is a trainable weight of the converted net (W, R, B of a layer hold both directions' and both biases)
    assert sum(p.numel() for p in net.parameters() if p.requires_grad) == sum(p.numel() for p in module.parameters())
    for batch in (x, torch.randn(1, 5, INPUT, dtype=torch.float64)):
        with torch.no_grad():
            torch.testing.assert_close(net(batch), module(batch), rtol=1e-12, atol=1e-12)
    assert_vmap_per_point_matches(model, x.numpy())


# ---- refusals


@pytest.mark.parametrize(
    "attributes, message",
    [
        ({"activations": ["Affine", "Tanh", "Tanh"]}, "activation Affine is not supported"),
        ({"activations": ["Sigmoid", "Tanh"]}, "activations has 2 entries"),
        ({"activation_alpha": [1.0]}, "attribute activation_alpha is not supported"),
        ({"activation_beta": [1.0]}, "attribute activation_beta is not supported"),
        ({"input_forget": 1}, "input_forget=1 is not supported"),
        ({"direction": "sideways"}, "direction=sideways is not supported"),
    ],
)
def test_unsupported_lstm_variants_are_refused_by_name(attributes, message):
    x, inputs, inits = recurrent_case("LSTM", 50, "forward", 0, bias=True, initial=False)
    with pytest.raises(OnnxConversionError, match=message):
        converted(recurrent_model("LSTM", x, inputs, inits, **attributes))


def test_sequence_lens_of_different_lengths_are_refused():
    x, inputs, inits = recurrent_case("RNN", 51, "forward", 0, bias=True, initial=False)
    inits["lens"] = np.array([SEQ, SEQ - 1], dtype=np.int32)
    with pytest.raises(OnnxConversionError, match="sequence_lens with different lengths"):
        converted(recurrent_model("RNN", x, ["x", "W", "R", "B", "lens"], inits))


@pytest.mark.parametrize("op, activations", [("GRU", ["HardSigmoid", "Tanh"]), ("RNN", ["Softsign"])])
def test_other_spec_activations_are_refused_by_name(op, activations):
    x, inputs, inits = recurrent_case(op, 52, "forward", 0, bias=False, initial=False)
    with pytest.raises(OnnxConversionError, match=f"activation {activations[0]} is not supported"):
        converted(recurrent_model(op, x, inputs, inits, activations=activations))

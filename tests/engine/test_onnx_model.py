"""The ONNX converter (engine/nets/onnx_model.py): every allowlisted operator against onnx's reference
evaluator, torch exports against their modules, and an ONNX MLP against the built-in standard MLP."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from torch import nn

from ntklab.api_schemas.spec import AnyModel, JobSpec, model_spec
from ntklab.api_schemas.uploads import ONNX_OPERATORS
from ntklab.engine.curvature.hessian import model_hessian
from ntklab.engine.kernels.ntk import resolve_method, tangent_kernel
from ntklab.engine.nets.network import build_network, trainable_parameters
from ntklab.engine.nets.onnx_model import OnnxConversionError, build_onnx_network
from ntklab.engine.run import run
from ntklab.engine.uploads import Uploads
from tests.engine.dense_reference import dense_hessian
from tests.upload_files import mlp_model

D = TensorProto.DOUBLE
MODEL_ID = "mdl_" + "0" * 32
rng = np.random.default_rng(0)


def spec_for(out: int) -> AnyModel:
    return model_spec(kind="onnx", id=MODEL_ID, output_dim=out)


def graph_model(nodes, x_shape, y_shape, initializers=(), x_type=D, opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", x_type, x_shape)],
        [helper.make_tensor_value_info("y", D, y_shape)],
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def init(name: str, value) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def W(*shape):
    return rng.normal(size=shape)


# One small graph per operator: (nodes, x shape, initializers, x value); the output is y.
CASES = {
    "Gemm": (
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
        [3, 4],
        [init("w", W(2, 4)), init("b", W(2))],
    ),
    "Gemm_scaled": (
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], alpha=0.5, beta=2.0)],
        [3, 4],
        [init("w", W(4, 2)), init("b", W(2))],
    ),
    "MatMul": (
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        [3, 4],
        [init("w", W(4, 2)), init("b", W(2))],
    ),
    "Sub": ([helper.make_node("Sub", ["x", "c"], ["y"])], [3, 4], [init("c", W(4))]),
    "Mul": ([helper.make_node("Mul", ["x", "c"], ["y"])], [3, 4], [init("c", W(3, 4))]),
    "Div": ([helper.make_node("Div", ["x", "c"], ["y"])], [3, 4], [init("c", W(4) + 3)]),
    "Neg": ([helper.make_node("Neg", ["x"], ["y"])], [3, 4], []),
    "Pow": ([helper.make_node("Pow", ["x", "p"], ["y"])], [3, 4], [init("p", np.array(2.0))]),
    "Sqrt": ([helper.make_node("Mul", ["x", "x"], ["a"]), helper.make_node("Sqrt", ["a"], ["y"])], [3, 4], []),
    "Exp": ([helper.make_node("Exp", ["x"], ["y"])], [3, 4], []),
    "Log": ([helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Log", ["e"], ["y"])], [3, 4], []),
    "Relu": ([helper.make_node("Relu", ["x"], ["y"])], [3, 4], []),
    "LeakyRelu": ([helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.2)], [3, 4], []),
    "Tanh": ([helper.make_node("Tanh", ["x"], ["y"])], [3, 4], []),
    "Sigmoid": ([helper.make_node("Sigmoid", ["x"], ["y"])], [3, 4], []),
    "Softplus": ([helper.make_node("Softplus", ["x"], ["y"])], [3, 4], []),
    "Erf": ([helper.make_node("Erf", ["x"], ["y"])], [3, 4], []),
    "Softmax": ([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [3, 4], []),
    "LogSoftmax": ([helper.make_node("LogSoftmax", ["x"], ["y"], axis=1)], [3, 4], []),
    "Conv": (
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
            helper.make_node("Flatten", ["c"], ["y"]),
        ],
        [2, 2, 5, 5],
        [init("w", W(3, 2, 3, 3)), init("b", W(3))],
    ),
    "Conv_grouped": (
        [
            helper.make_node("Conv", ["x", "w"], ["c"], group=2, pads=[0, 1, 1, 0], dilations=[1, 2]),
            helper.make_node("Flatten", ["c"], ["y"]),
        ],
        [2, 2, 5, 5],
        [init("w", W(4, 1, 2, 2))],
    ),
    "MaxPool": (
        [
            helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Flatten", ["p"], ["y"]),
        ],
        [2, 2, 5, 5],
        [],
    ),
    "AveragePool": (
        [
            helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
            helper.make_node("Flatten", ["p"], ["y"]),
        ],
        [2, 2, 4, 4],
        [],
    ),
    "GlobalAveragePool": (
        [helper.make_node("GlobalAveragePool", ["x"], ["p"]), helper.make_node("Flatten", ["p"], ["y"])],
        [2, 3, 4, 4],
        [],
    ),
    "LayerNormalization": (
        [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5)],
        [3, 4],
        [init("s", W(4)), init("b", W(4))],
    ),
    "BatchNormalization": (
        [
            helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"]),
            helper.make_node("Flatten", ["n"], ["y"]),
        ],
        [2, 3, 2, 2],
        [init("s", W(3)), init("b", W(3)), init("m", W(3)), init("v", np.abs(W(3)) + 0.5)],
    ),
    "Reshape": ([helper.make_node("Reshape", ["x", "shape"], ["y"])], [2, 3, 4], [init("shape", np.array([0, -1]))]),
    "Transpose": (
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), helper.make_node("Flatten", ["t"], ["y"])],
        [2, 3, 4],
        [],
    ),
    "Squeeze": ([helper.make_node("Squeeze", ["x", "axes"], ["y"])], [3, 1, 4], [init("axes", np.array([1]))]),
    "Unsqueeze": (
        [helper.make_node("Unsqueeze", ["x", "axes"], ["u"]), helper.make_node("Flatten", ["u"], ["y"])],
        [3, 4],
        [init("axes", np.array([1, -1]))],
    ),
    "Concat": ([helper.make_node("Concat", ["x", "c"], ["y"], axis=1)], [3, 4], [init("c", W(3, 2))]),
    "ReduceMean": ([helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)], [3, 4, 2], []),
    "ReduceSum": (
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
        [3, 4, 2],
        [init("axes", np.array([2]))],
    ),
    "Identity": ([helper.make_node("Identity", ["x"], ["y"])], [3, 4], []),
    "Dropout": ([helper.make_node("Dropout", ["x"], ["y"])], [3, 4], []),
    "Constant": (
        [
            helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(W(4))),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        [3, 4],
        [],
    ),
    "Cast": (
        [
            helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64),
            helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT),
        ],
        [3, 4],
        [],
    ),
    "Shape": (
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["g"], axis=0),
            helper.make_node("Unsqueeze", ["g", "ax"], ["u"]),
            helper.make_node("Concat", ["u", "minus"], ["t"], axis=0),
            helper.make_node("Reshape", ["x", "t"], ["y"]),
        ],
        [3, 2, 2],
        [init("zero", np.array(0)), init("ax", np.array([0])), init("minus", np.array([-1]))],
    ),
    "Gelu": ([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], [3, 4], []),
    "Add": ([helper.make_node("Add", ["x", "x"], ["y"])], [3, 4], []),
}


def reference_and_converted(name):
    nodes, x_shape, initializers = CASES[name]
    opset = 20 if name == "Gelu" else 17
    model = graph_model(nodes, ["n", *x_shape[1:]], None, initializers, opset=opset)
    model.graph.output[0].type.tensor_type.ClearField("shape")
    x = rng.normal(size=x_shape) * (3 if name == "Cast" else 1)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    converted = build_onnx_network(spec_for(1), model.SerializeToString(), dtype=torch.float64)
    return x, expected, converted


def test_every_allowlisted_operator_has_a_case():
    """Each operator of the table is exercised here (CASES) or by name in tests/engine/onnx_ops/ (one file per family)."""
    covered = {op for nodes, _, _ in CASES.values() for op in (node.op_type for node in nodes)}
    family_tests = "".join(path.read_text() for path in (Path(__file__).parent / "onnx_ops").glob("test_*.py"))
    covered |= {op for op in ONNX_OPERATORS if f'"{op}"' in family_tests}
    assert ONNX_OPERATORS <= covered, sorted(ONNX_OPERATORS - covered)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_operator_matches_the_onnx_reference(name):
    x, expected, converted = reference_and_converted(name)
    with torch.no_grad():
        got = converted(torch.as_tensor(x)).numpy()
    assert got.shape == expected.shape
    # the reference evaluator computes Gelu and Erf in float32, and takes LeakyRelu's alpha as the float32 the file
    # stores (0.2000000030), where the converter reads the decimal 0.2 the module was written with (registry.decoded_attributes)
    loose = name in ("Gelu", "Erf", "LeakyRelu")
    np.testing.assert_allclose(got, expected, rtol=1e-6 if loose else 1e-12, atol=1e-7 if loose else 1e-12)


def test_gather_as_an_embedding_on_integer_tokens():
    table = W(10, 4)
    model = graph_model(
        [
            helper.make_node("Gather", ["e", "x"], ["g"], axis=0),
            helper.make_node("ReduceMean", ["g"], ["y"], axes=[1], keepdims=0),
        ],
        ["n", 5],
        ["n", 4],
        [init("e", table)],
        x_type=TensorProto.INT64,
    )
    tokens = rng.integers(0, 10, size=(3, 5))
    net = build_onnx_network(spec_for(4), model.SerializeToString(), dtype=torch.float64)
    got = net(torch.as_tensor(tokens)).detach().numpy()
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": tokens})[0], rtol=1e-12)
    assert [name for name, p in net.named_parameters()] == [
        "layers.0.weight"
    ]  # a ScaledEmbedding (test_onnx_layers.py)
    assert net.parameter_sources == {"layers.0.weight": ("e", False)}


def test_weights_are_trainable_and_linear_layers_take_the_structured_path():
    net = build_onnx_network(spec_for(2), mlp_model().SerializeToString(), dtype=torch.float64)
    assert sum(p.numel() for p in net.parameters() if p.requires_grad) == 50
    assert resolve_method(net, "auto") == "structured"
    bn_only = CASES["LayerNormalization"]
    model = graph_model(bn_only[0], ["n", 4], ["n", 4], bn_only[2])
    assert resolve_method(build_onnx_network(spec_for(4), model.SerializeToString()), "auto") == "jacobian"


def test_an_unsupported_variant_names_its_node():
    model = graph_model(
        [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="cubic", name="/encoder/up/Resize")],
        ["n", 1, 4, 4],
        None,
        [init("s", np.array([1.0, 1.0, 2.0, 2.0]))],
    )
    with pytest.raises(
        OnnxConversionError, match=r"mode=cubic is not supported.*node '/encoder/up/Resize', module /encoder/up"
    ):
        build_onnx_network(spec_for(1), model.SerializeToString())
    made_up = graph_model([helper.make_node("Relu", ["x"], ["y"], name="act", shiny=1)], ["n", 4], None)
    with pytest.raises(OnnxConversionError, match="Relu attribute shiny is not supported"):
        build_onnx_network(spec_for(1), made_up.SerializeToString())
    loop = mlp_model()
    loop.graph.node[1].op_type = "Loop"
    with pytest.raises(OnnxConversionError, match="Loop"):
        build_onnx_network(spec_for(2), loop.SerializeToString())


# --------------------------------------------------------------------------- torch exports


class Flattened(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(1, 3, 3, padding=1), nn.Linear(3 * 36, 2)

    def forward(self, x):
        return self.fc(torch.tanh(self.conv(x)).view(x.size(0), -1))


class Tokens(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.norm, self.fc = nn.Embedding(10, 6), nn.LayerNorm(6), nn.Linear(6, 2)

    def forward(self, t):
        return self.fc(self.norm(self.embed(t)).mean(1))


class PreLNBlock(nn.Module):
    """A pre-LN transformer block over tokens x [n, T, d] with a mean-pooled linear head:
    x + proj(softmax(q kᵀ / √d_h) v) per head, then x + fc2(gelu(fc1(LN(x)))); y = head(mean_T x)."""

    def __init__(self, d: int = 8, heads: int = 2, hidden: int = 16, out: int = 2) -> None:
        super().__init__()
        self.heads, self.d_head = heads, d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2, self.head = nn.Linear(d, hidden), nn.Linear(hidden, d), nn.Linear(d, out)

    def split(self, t):
        n, T, _ = t.shape
        return t.reshape(n, T, self.heads, self.d_head).transpose(1, 2)

    def forward(self, x):
        n, T, d = x.shape
        h = self.ln1(x)
        q, k, v = self.split(self.q(h)), self.split(self.k(h)), self.split(self.v(h))
        attention = torch.softmax(q @ k.transpose(-2, -1) / self.d_head**0.5, dim=-1)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(n, T, d))
        x = x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))
        return self.head(x.mean(1))


EXPORTS = {
    "mlp": (
        lambda: nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 2)),
        (5, 4),
        "structured",
    ),
    "cnn": (
        lambda: nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(4, 4, 3, stride=2, padding=1),
            nn.Softplus(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(4, 2),
        ),
        (5, 1, 8, 8),
        "structured",
    ),
    "view": (Flattened, (5, 1, 6, 6), "structured"),
    "tokens": (Tokens, (5, 7), "jacobian"),
    "transformer": (PreLNBlock, (5, 4, 8), "jacobian"),
}


def export(module: nn.Module, x: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (x,),
            buffer,
            dynamo=False,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
            keep_initializers_as_inputs=True,
        )
    return buffer.getvalue()


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_a_torch_export_converts_back_to_the_same_function_and_kernel(name):
    make, shape, method = EXPORTS[name]
    torch.manual_seed(0)
    module = make().double().eval()
    x = torch.randint(0, 10, shape) if name == "tokens" else torch.randn(shape, dtype=torch.float64)
    net = build_onnx_network(spec_for(2), export(module, x), dtype=torch.float64)
    for batch in (x, x[:1], torch.cat([x, x])):
        torch.testing.assert_close(net(batch), module(batch), rtol=1e-12, atol=1e-12)
    assert sum(p.numel() for p in net.parameters()) == sum(p.numel() for p in module.parameters())
    assert resolve_method(net, "auto") == method
    kernels = {m: tangent_kernel(net, x, method=m) for m in ("jacobian", "ntk_vp", "structured")}
    for K in kernels.values():
        torch.testing.assert_close(K, kernels["jacobian"], rtol=1e-10, atol=1e-12)


TINY_EXPORTS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 6), nn.GELU(), nn.Linear(6, 1)), (2, 3)),
    "cnn": (
        lambda: nn.Sequential(
            nn.Conv2d(1, 2, 3, padding=1),
            nn.Tanh(),
            nn.MaxPool2d(2),
            nn.Conv2d(2, 2, 3, padding=1),
            nn.Softplus(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(2, 1),
        ),
        (2, 1, 6, 6),
    ),
    "transformer": (lambda: PreLNBlock(d=4, heads=2, hidden=6, out=1), (2, 3, 4)),
}


@pytest.mark.parametrize("name", sorted(TINY_EXPORTS))
def test_lanczos_on_an_onnx_export_matches_the_dense_hessian(name):
    """Every eigenvalue Lanczos reports (p + 1 iterations, a full Krylov basis) is one of the dense
    Hessian's, its top-3 |λ| are the dense top 3, and ‖H‖ is the dense spectral norm, in float64."""
    make, shape = TINY_EXPORTS[name]
    torch.manual_seed(1)
    module = make().double().eval()
    with torch.no_grad():
        for parameter in module.parameters():  # trained-looking weights: no two initializers equal
            parameter.add_(0.3 * torch.randn_like(parameter))
    x = torch.randn(shape, dtype=torch.float64)
    net = build_onnx_network(spec_for(1), export(module, x), dtype=torch.float64)
    p = sum(t.numel() for t in trainable_parameters(net).values())
    assert p == sum(t.numel() for t in module.parameters()) <= 400
    report = model_hessian(net, x[:1], top_k=3, iterations=p + 1)
    dense = dense_hessian(net, x[0])
    spectrum = torch.linalg.eigvalsh((dense + dense.T) / 2)
    scale = float(spectrum.abs().max())
    torch.testing.assert_close(dense, dense.T, rtol=0, atol=1e-10 * scale)
    top = sorted(spectrum.abs().tolist(), reverse=True)[:3]
    assert sorted(map(abs, report.eigenvalues[0][0]), reverse=True) == pytest.approx(top, rel=1e-6)
    for ritz in report.eigenvalues[0][0]:
        assert float((spectrum - ritz).abs().min()) <= 1e-8 * scale
    assert report.norm == pytest.approx(scale, rel=1e-8)


# --------------------------------------------------------------------------- the same MLP, built in and uploaded


def test_an_onnx_mlp_with_the_built_in_standard_weights_gives_the_same_kernel_and_hessian():
    """float64: the uploaded copy of a built-in standard-parameterization MLP measures the same to 1e-10."""
    common = {
        "seed": 3,
        "dtype": "float64",
        "data": {"kind": "gaussian_mixture", "n_train": 12, "input_dim": 3, "classes": 2, "probe": {"n": 6}},
        "training": {"max_steps": 20, "lr": 0.05, "target_loss": None},
        "diagnostics": {
            "kernel": {"schedule": "every", "every": 5},
            "hessian": {"at": ["init", "final"], "probe_points": 2, "iterations": 30},
        },
    }
    builtin = JobSpec.model_validate(
        {**common, "model": {"hidden": [16], "activation": "tanh", "parameterization": "standard"}}
    )
    net = build_network(builtin.model, (3,), seed=3, dtype=torch.float64)
    layer, readout = net.stages[0].layer, net.readout
    weights = [t.detach().numpy() for t in (layer.weight, layer.bias, readout.weight, readout.bias)]
    onnx_bytes = mlp_model(weights, activation="Tanh").SerializeToString()
    uploaded = JobSpec.model_validate(
        {
            **common,
            "model": {
                "kind": "onnx",
                "id": MODEL_ID,
                "stored": {"parameters": 98, "input_shape": [3], "output_dim": 2},
            },
        }
    )
    expected = run(builtin, device="cpu")
    got = run(uploaded, device="cpu", uploads=Uploads(models={MODEL_ID: onnx_bytes}))
    assert got.summary["kernel_method"] == expected.summary["kernel_method"] == "structured"
    for when in ("init", "final"):
        K0 = np.load(io.BytesIO(expected.artifacts[f"kernel_{when}.npy"].data))
        K1 = np.load(io.BytesIO(got.artifacts[f"kernel_{when}.npy"].data))
        assert np.linalg.norm(K1 - K0) / np.linalg.norm(K0) < 1e-10
        assert got.summary[f"hessian_norm_{when}"] == pytest.approx(expected.summary[f"hessian_norm_{when}"], rel=1e-10)
    for name in ("final_loss", "delta_k_max", "weight_change_l2"):
        assert got.summary[name] == pytest.approx(expected.summary[name], rel=1e-9, abs=1e-14)


def test_uploaded_tokens_train_an_onnx_embedding_model():
    """An uploaded data set of integer token ids reaches an ONNX model with an integer input as int64."""
    module = Tokens().double().eval()
    tokens = torch.randint(0, 10, (12, 7))
    onnx_bytes = export(module, tokens)
    dataset_id = "ds_" + "2" * 32
    spec = JobSpec.model_validate(
        {
            "dtype": "float64",
            "model": {
                "kind": "onnx",
                "id": MODEL_ID,
                "stored": {"parameters": 10 * 6 + 12 + 14, "input_shape": [7], "output_dim": 2, "input_integer": True},
            },
            "data": {
                "kind": "dataset",
                "id": dataset_id,
                "n_train": 10,
                "probe": {"n": 4},
                "stored": {"points": 12, "x_shape": [7], "x_integer": True, "y_width": 2},
            },
            "training": {"max_steps": 5, "lr": 0.1, "target_loss": None},
            "diagnostics": {"hessian": {"iterations": 6, "probe_points": 1}},
        }
    )
    uploads = Uploads(
        datasets={dataset_id: (tokens.numpy().astype(np.int32), np.random.default_rng(0).normal(size=(12, 2)))},
        models={MODEL_ID: onnx_bytes},
    )
    result = run(spec, device="cpu", uploads=uploads)
    assert result.summary["steps"] == 5 and result.summary["kernel_method"] == "jacobian"
    assert result.summary["parameters"] == 86 and np.isfinite(result.summary["final_loss"])


def test_nodes_computed_from_constants_alone_are_folded_once_at_conversion():
    """A causal mask built from constants (Range → Unsqueeze → LessOrEqual → Where) becomes one constant: the network's
    forward runs only the nodes that depend on x or on a weight, and gives the reference's answer."""
    T = 4
    nodes = [
        helper.make_node("Range", ["zero", "t", "one"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "ax0"], ["row"]),
        helper.make_node("Unsqueeze", ["r", "ax1"], ["col"]),
        helper.make_node("LessOrEqual", ["row", "col"], ["keep"]),
        helper.make_node("Where", ["keep", "zero_f", "minus"], ["mask"]),
        helper.make_node("MatMul", ["x", "w"], ["scores"]),
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["y"], axis=-1),
    ]
    inits = [
        init("zero", np.array(0)),
        init("t", np.array(T)),
        init("one", np.array(1)),
        init("ax0", np.array([0])),
        init("ax1", np.array([1])),
        init("zero_f", np.array(0.0)),
        init("minus", np.array(-1e9)),
        init("w", W(T, T)),
    ]
    model = graph_model(nodes, ["n", T, T], None, inits, opset=18)
    model.graph.output[0].type.tensor_type.ClearField("shape")
    net = build_onnx_network(spec_for(1), model.SerializeToString(), dtype=torch.float64)
    assert [step.op for step in net.steps] == ["MatMul", "Add", "Softmax"]
    x = rng.normal(size=(2, T, T))
    np.testing.assert_allclose(
        net(torch.as_tensor(x)).detach().numpy(), ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-12
    )

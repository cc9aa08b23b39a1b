"""Graph specs without torch: validation names the layer and the shapes, the arithmetic count,
the service's caps on graph widths, sweeps over dotted paths into the layers."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ntklab.api_schemas.graph import Dense
from ntklab.api_schemas.graph_plan import GraphShapeError, plan_graph
from ntklab.api_schemas.spec import JobSpec, model_spec
from ntklab.planner.architecture import count_parameters, plan_model_graph
from ntklab.planner.builtin_graphs import builtin_as_graph
from ntklab.service.grid import expand_grid
from tests.engine.spec_errors import error_text

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples" / "graphs").glob("*.json"))
DIGITS = {"kind": "builtin", "name": "digits", "n_train": 16}
MIXTURE = {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 32}
LN, GAP, FLAT = {"type": "layer_norm"}, {"type": "global_avg_pool"}, {"type": "flatten"}


def graph_job(layers, data=DIGITS, **model) -> dict:
    return {"data": data, "model": {"kind": "graph", "layers": layers, **model}}


def test_every_example_is_a_valid_job():
    assert {path.name for path in EXAMPLES} == {
        "vit-small.json",
        "vgg-like.json",
        "pre-ln-transformer.json",
        "resnet-layernorm.json",
    }
    for path in EXAMPLES:
        spec = JobSpec.model_validate_json(path.read_text())
        assert spec.model.kind == "graph" and spec.model.output_dim is not None


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        (graph_job([{"type": "dense", "width": 0}]), "model.layers.0.dense.width"),
        (graph_job([{"type": "dense", "width": 4, "height": 2}]), "model.layers.0.dense.height"),
        (graph_job([{"type": "convolution", "width": 4}]), "model.layers.0"),
        (graph_job([{"type": "activation", "name": "sigmoidish"}]), "model.layers.0.activation.name"),
        (
            graph_job([{"type": "residual", "layers": [{"type": "dense", "width": -1}]}]),
            "model.layers.0.residual.layers.0.dense.width",
        ),
        (graph_job([{"type": "max_pool", "kernel_size": 2, "padding": 2}]), "padding 2 exceeds half of kernel_size 2"),
        (graph_job([{"type": "self_attention", "heads": 3, "width": 16}]), "width 16 does not split into 3 heads"),
        (graph_job([]), "model.layers"),
        ({"model": {"kind": "graph"}}, "model.layers is required for model.kind = 'graph'"),
        (
            {"model": {"kind": "mlp", "layers": [{"type": "dense", "width": 3}]}},
            "model.layers is for model.kind = 'graph' only",
        ),
        ({"model": {"kind": "cnn", "hidden": [4], "input_shape": [8, 8]}}, "model.input_shape must be (C, H, W)"),
    ],
)
def test_malformed_layers_are_refused_naming_the_field(spec, named):
    assert named in error_text(spec)


@pytest.mark.parametrize(
    ("layers", "model", "message"),
    [
        (
            [{"type": "dense", "width": 4}],
            {"input_shape": [1, 8, 8]},
            "model.layers.0 (dense) needs a vector or a token sequence, got the image [1, 8, 8]",
        ),
        ([{"type": "conv2d", "width": 4}, GAP], {}, "model.layers.0 (conv2d) needs an image, got the vector [64]"),
        (
            [{"type": "conv2d", "width": 4, "kernel_size": 11, "padding": 1}, GAP],
            {"input_shape": [1, 8, 8]},
            "model.layers.0 (conv2d) with kernel_size 11, stride 1, padding 1 maps the image [1, 8, 8] to 0×0",
        ),
        (
            [
                {"type": "patch_embed", "patch": 2, "width": 8},
                {"type": "residual", "layers": [LN, {"type": "conv2d", "width": 8}]},
            ],
            {"input_shape": [1, 8, 8]},
            "model.layers.1.layers.1 (conv2d) needs an image, got the token sequence [16, 8]",
        ),
        (
            [{"type": "patch_embed", "patch": 4, "width": 8}],
            {"input_shape": [1, 8, 8]},
            "model.layers ends in the token sequence [4, 8]; the readout reads a vector",
        ),
        (
            [{"type": "dense", "width": 8}, {"type": "self_attention", "width": 8}],
            {},
            "model.layers.1 (self_attention) needs a token sequence, got the vector [8]",
        ),
        (
            [{"type": "dense", "width": 8}, {"type": "embedding", "vocab": 5, "width": 8}, GAP],
            {},
            "model.layers.1 (embedding) reads integer token ids from the input, so it must be model.layers.0",
        ),
        (
            [{"type": "dense", "width": 8}, {"type": "residual", "layers": [GAP]}],
            {"input_shape": [8, 8]},
            "model.layers.1 (residual): the branch maps the token sequence [8, 8] to the vector [8]",
        ),
        (
            [
                {"type": "conv2d", "width": 4},
                {"type": "residual", "layers": [{"type": "conv2d", "width": 4, "padding": 0}]},
                GAP,
            ],
            {"input_shape": [1, 8, 8]},
            "maps the image [4, 8, 8] to the image [4, 6, 6], which no 1×1 strided projection",
        ),
        ([FLAT, {"type": "activation", "name": "relu"}], {}, "model.layers has no weight layer"),
        (
            [{"type": "dense", "width": 8}],
            {"input_shape": [4, 4]},
            "model.input_shape [4, 4] does not hold the data's 64 features",
        ),
    ],
)
def test_shape_errors_name_the_layer_path_and_the_shapes(layers, model, message):
    assert message in error_text(graph_job(layers, **model))


def test_an_embedding_needs_integer_token_ids_in_the_data():
    embed = [{"type": "embedding", "vocab": 5, "width": 8}, GAP]
    inline = {"kind": "inline", "x": [[0, 1, 4], [2, 2, 3]], "y": [1.0, -1.0]}
    assert JobSpec.model_validate(graph_job(embed, data=inline)).model.layers[0].vocab == 5
    assert "does not hold them" in error_text(graph_job(embed, data={**inline, "x": [[0, 1, 5], [2, 2, 3]]}))
    assert "does not hold them" in error_text(graph_job(embed, data={**inline, "x": [[0, 1.5, 4], [2, 2, 3]]}))
    assert "data.kind 'gaussian_mixture' does not hold them" in error_text(graph_job(embed, data=MIXTURE))


def test_plan_of_the_small_vit_gives_each_layers_shape_and_parameters():
    spec = JobSpec.model_validate_json((REPO / "examples/graphs/vit-small.json").read_text())
    plan = plan_model_graph(spec.model, (64,))
    shapes = [(layer.path, layer.in_shape, layer.out_shape) for layer in plan.layers]
    assert shapes == [
        ("model.layers.0", (1, 8, 8), (16, 16)),
        ("model.layers.1", (16, 16), (16, 16)),
        ("model.layers.2", (16, 16), (16, 16)),
        ("model.layers.3", (16, 16), (16, 16)),
        ("model.layers.4", (16, 16), (16,)),
    ]
    assert [inner.path for inner in plan.layers[2].branch] == [f"model.layers.2.layers.{i}" for i in range(4)]
    # patch conv 16·1·2² + 16, positions 16·16; attention 4·16·16 + 3·16 + 16; MLP (32·16 + 32) + (16·32 + 16);
    # three LayerNorms 3·2·16; readout 10·16 + 10
    assert count_parameters(spec.model, (64,)) == (80 + 256) + 1088 + 1072 + 96 + 170


def test_projection_counts_and_bias_overrides():
    layers = [Dense(width=6, bias=False), {"type": "residual", "layers": [{"type": "dense", "width": 9}]}]
    plan = plan_graph(
        [Dense(width=6, bias=False), *model_spec(kind="graph", layers=layers).layers[1:]], (4,), bias=True
    )
    assert [layer.parameters for layer in plan.layers] == [6 * 4, (9 * 6 + 9) + 6 * 9]
    assert plan.layers[1].projection_stride == 1
    image = [
        {"type": "conv2d", "width": 3},
        {"type": "residual", "layers": [{"type": "conv2d", "width": 5, "stride": 2}]},
        GAP,
    ]
    strided = plan_model_graph(model_spec(kind="graph", layers=image, input_shape=[2, 7, 7], output_dim=1), (98,))
    assert strided.layers[1].out_shape == (5, 4, 4) and strided.layers[1].projection_stride == 2
    with pytest.raises(GraphShapeError, match="model.input_shape"):
        plan_graph(model_spec(kind="graph", layers=image).layers, (1, 2, 3, 4), bias=True)


BUILTINS = [
    ({"hidden": [16, 3, 16], "activation": ["relu", "identity", "tanh"], "output_dim": 3}, (5,)),
    ({"hidden": [7], "bias": False, "output_dim": 2, "train_output_layer": False}, (1, 2, 2)),
    ({"kind": "cnn", "hidden": [4, 6], "output_dim": 2, "readout": "flatten"}, (1, 8, 8)),
    ({"kind": "cnn", "hidden": [5, 5], "output_dim": 4, "input_shape": [1, 8, 8], "bias": False}, (64,)),
    ({"kind": "resnet", "hidden": [8], "blocks": 3, "output_dim": 2}, (5,)),
    (
        {"kind": "resnet", "block": "conv", "hidden": [4], "output_dim": 3, "stride": 2, "train_output_layer": False},
        (3, 6, 6),
    ),
]


@pytest.mark.parametrize("fields,shape", BUILTINS)
def test_builtin_kinds_as_graphs_count_the_same_parameters(fields, shape):
    model = model_spec(**fields)
    graph = builtin_as_graph(model, shape)
    assert graph.kind == "graph" and graph.output_dim == model.output_dim and graph.bias == model.bias
    assert count_parameters(graph, shape) == count_parameters(model, shape)


def test_a_sweep_varies_graph_widths_by_dotted_paths():
    base = json.loads((REPO / "examples/graphs/vit-small.json").read_text())
    points = expand_grid(base, {"model.layers.2.layers.1.width": [8, 64], "model.layers.1.layers.1.heads": [1, 4]})
    assert [(p.spec.model.layers[2].layers[1].width, p.spec.model.layers[1].layers[1].heads) for p in points] == [
        (8, 1),
        (8, 4),
        (64, 1),
        (64, 4),
    ]
    counts = [count_parameters(p.spec.model, (64,)) for p in points]
    assert counts[0] == counts[1] < counts[2] == counts[3]


CAPS_PROGRAM = """
import json, sys
from ntklab.api_schemas.spec import JobSpec
from ntklab.config.settings import Settings
import ntklab.service.caps
from ntklab.service.problems import ProblemError

specs = json.loads(sys.argv[1])
counts, fields = {}, {}
for name, body in specs.items():
    try:
        counts[name] = ntklab.service.caps.check_spec_caps(JobSpec.model_validate(body), Settings(max_width=40))
    except ProblemError as error:
        fields[name] = [e.field for e in error.problem.errors]
print(json.dumps({"counts": counts, "fields": fields, "torch": [m for m in sys.modules if m.split(".")[0] == "torch"]}))
"""


def test_caps_count_graphs_and_cap_nested_widths_without_torch():
    vit = json.loads((REPO / "examples/graphs/vit-small.json").read_text())
    wide = json.loads(json.dumps(vit))
    wide["model"]["layers"][2]["layers"][1]["width"] = 41
    answer = subprocess.run(
        [sys.executable, "-c", CAPS_PROGRAM, json.dumps({"vit": vit, "wide": wide})],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout.strip().splitlines()[-1])
    assert report == {"counts": {"vit": 2762}, "fields": {"wide": ["model.layers.2.layers.1.width"]}, "torch": []}

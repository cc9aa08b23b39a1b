"""ntklab.service.onnx_shapes and the per-example counts built on it, against the model evaluated whole.

The reference is onnx.reference.ReferenceEvaluator running the full graph at batch 1 and 2 with every node
output made a graph output: the shape of each computed tensor, which concrete_shapes must give without
computing any activation. The networks are torch modules whose export hides the batch axis from plain ONNX
shape inference (a Reshape to a target computed from Shape, a causal mask built with Range, a computed
Pad): before concrete_shapes the upload counted 3 activation elements per example for EfficientNet where
the worker measures about 1 MB saved per point (issue 24, item 5).
"""

from __future__ import annotations

import contextlib
import io
import math
import tracemalloc
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from ntklab.onnx_export import export_module
from ntklab.service.onnx_shapes import MAX_VALUE_ELEMENTS, concrete_shapes
from ntklab.service.onnx_upload import per_example_cost


class FlattenedConv(torch.nn.Module):
    """Conv → x.view(x.shape[0], -1) (Shape → Gather → Concat → Reshape) → Linear."""

    def __init__(self):
        super().__init__()
        self.conv, self.head = torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.Linear(4 * 5 * 5, 3)

    def forward(self, x):
        h = torch.tanh(self.conv(x))
        return self.head(h.view(h.shape[0], -1))


class CausalMixer(torch.nn.Module):
    """Embedding, then a causal mask of the sequence's length (arange of a run-time size) and a padded shift."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(11, 6), torch.nn.Linear(6, 2)

    def forward(self, tokens):
        h = self.embed(tokens)  # [B, T, 6]
        length = tokens.shape[1]
        positions = torch.arange(length)
        mask = (positions[None, :] <= positions[:, None]).to(h.dtype)  # [T, T]
        mixed = mask @ h / mask.sum(-1, keepdim=True)
        shifted = torch.nn.functional.pad(mixed, (0, 0, 1, 0))[:, :length]
        return self.head(shifted.mean(1))


NETWORKS = {
    "flattened_conv": (FlattenedConv, torch.randn(2, 2, 5, 5)),
    "causal_mixer": (CausalMixer, torch.randint(0, 11, (2, 7))),
}


def exported(name: str) -> onnx.ModelProto:
    factory, x = NETWORKS[name]
    torch.manual_seed(0)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return onnx.load_from_string(export_module(factory(), x))


def evaluated_shapes(model: onnx.ModelProto, name: str, batch: int) -> dict[str, list[int]]:
    """Every node output's shape with the whole graph run at `batch` (the reference)."""
    whole = onnx.ModelProto()
    whole.CopyFrom(model)
    names = [name for node in whole.graph.node for name in node.output if name]
    del whole.graph.output[:]
    whole.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names)
    x = NETWORKS[name][1].numpy()
    feed = np.zeros((batch, *x.shape[1:]), x.dtype)
    results = ReferenceEvaluator(whole).run(None, {model.graph.input[0].name: feed})
    return {output: list(np.shape(value)) for output, value in zip(names, results)}


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_plain_shape_inference_loses_the_batch_axis_of_these_exports(name):
    model = exported(name)
    inferred = onnx.shape_inference.infer_shapes(model)
    batch = model.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    axes = [value.type.tensor_type.shape.dim for value in inferred.graph.value_info]
    assert any(dims and dims[0].dim_param not in ("", batch) for dims in axes), (
        "the export no longer renames the batch axis"
    )


@pytest.mark.parametrize("batch", [1, 2, 5])
@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_every_node_output_has_the_shape_the_evaluated_graph_gives_it(name, batch):
    model = exported(name)
    shapes = concrete_shapes(model, model.graph.input[0].name, batch)
    reference = evaluated_shapes(model, name, batch)
    assert {output: shapes[output] for output in reference} == reference


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_per_example_elements_are_the_growth_of_the_evaluated_graph_from_batch_one_to_two(name):
    model = exported(name)
    one, two = evaluated_shapes(model, name, 1), evaluated_shapes(model, name, 2)
    growth = sum(math.prod(two[output]) - math.prod(one[output]) for output in one)
    elements, flops = per_example_cost(model, model.graph.input[0].name)
    assert elements == growth > 0
    assert flops >= elements


def test_shape_arithmetic_that_would_allocate_past_the_bound_is_left_unevaluated():
    # ConstantOfShape([batch · 10⁹]) from the input's own shape: evaluated, it would allocate 8 GB.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
        helper.make_node("Constant", [], ["big"], value=helper.make_tensor("big", TensorProto.INT64, [1], [10**9])),
        helper.make_node("Mul", ["s", "big"], ["n"]),
        helper.make_node("ConstantOfShape", ["n"], ["ones"]),
        helper.make_node("ReduceSum", ["ones"], ["total"], keepdims=1),
        helper.make_node("Mul", ["x", "total"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bound",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    tracemalloc.start()
    try:
        shapes = concrete_shapes(model, "x", 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert shapes["n"] == [1]  # the size itself is shape arithmetic, evaluated
    assert shapes["ones"] == [
        2 * 10**9
    ]  # its shape inferred (a per-example cost the estimate will refuse), never computed
    assert peak < 64 * MAX_VALUE_ELEMENTS * 8

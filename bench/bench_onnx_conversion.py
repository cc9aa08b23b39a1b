"""How converting an uploaded ONNX model grows with its initializers (issue 25, item 5).

    .venv/bin/python -m bench.bench_onnx_conversion [--sizes 5000 10000 20000 40000] [--repeats 3]

The model is a chain y = x + b₁ + … + b_N of N Add nodes, each with its own [3] bias initializer: N trainable
initializers and N nodes, the shape of a real export's many small parameters (biases, norms) without their
arithmetic. The time is the median of R builds of ntklab.engine.nets.onnx_model.OnnxNetwork from the parsed graph
(float64, CPU); "per initializer" is that time / N, which stays flat when the conversion is linear. Before
the fix, naming each parameter rebuilt the set of names already taken (and the graph's inputs were tested
against a set of initializer names rebuilt for each input): quadratic, 67 s at N = 40 000.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from onnx import TensorProto, helper, numpy_helper

from bench.tables import print_head, print_row
from ntklab.api_schemas.spec import OnnxModel
from ntklab.engine.nets.onnx_model import OnnxNetwork


def chain(n: int):
    """The graph of y = x + b₁ + … + b_n, x [batch, 3]."""
    nodes, initializers, previous = [], [], "x"
    for i in range(n):
        initializers.append(numpy_helper.from_array(np.full(3, 1e-3 * i, np.float32), f"b{i}"))
        nodes.append(helper.make_node("Add", [previous, f"b{i}"], [f"h{i}"]))
        previous = f"h{i}"
    nodes.append(helper.make_node("Identity", [previous], ["y"]))
    return helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        initializers,
    )


def seconds_to_convert(n: int, repeats: int) -> float:
    graph = chain(n)
    spec = OnnxModel.model_validate(
        {"kind": "onnx", "id": "mdl_" + "0" * 32, "stored": {"parameters": 3 * n, "input_shape": [3], "output_dim": 3}}
    )
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        OnnxNetwork(spec, graph, 17, torch.float64, "cpu", lambda: None)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 20000, 40000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print_head(
        f"Converting an ONNX model: time against initializers (median of {args.repeats})",
        ["initializers (= nodes)", "seconds", "µs per initializer", "ratio to the smallest"],
    )
    first = None
    for n in args.sizes:
        seconds = seconds_to_convert(n, args.repeats)
        per = seconds / n
        first = first or per
        print_row(f"{n:,}", f"{seconds:.2f}", f"{per * 1e6:.0f}", f"{per / first:.2f}")


if __name__ == "__main__":
    main()

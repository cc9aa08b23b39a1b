"""The converter's table is the single source of what an upload may use: the API's copy (api_schemas/onnx_operators.py)
and the docs' table (docs/models.md) are generated from it and must not be stale."""

from __future__ import annotations

from ntklab.api_schemas.onnx_operators import ONNX_OPERATOR_ATTRIBUTES
from ntklab.engine.nets.onnx_ops import table as generator
from ntklab.engine.nets.onnx_ops.registry import table


def test_the_api_copy_and_the_docs_are_generated_from_the_converter_table():
    assert generator.main(["--check"]) == 0, "run: python -m ntklab.engine.nets.onnx_ops.table"
    assert ONNX_OPERATOR_ATTRIBUTES == {name: op.attributes for name, op in table().items()}


def test_every_operator_states_what_it_computes():
    assert [name for name, op in table().items() if not op.summary] == []

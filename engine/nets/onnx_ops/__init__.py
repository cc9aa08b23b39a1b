"""The ONNX operators the converter (engine/nets/onnx_model.py) implements, one module per family.

registry.py holds the table (op type → builder and accepted attributes); the family modules
register into it when `registry.table()` first imports them.
"""

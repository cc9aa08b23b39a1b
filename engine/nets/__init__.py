"""The networks: built-in families, layer graphs, the ONNX converter (onnx_ops/), scaled layers, parameterizations and activations."""

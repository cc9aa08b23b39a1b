"""A torch.nn.Module exported to ONNX as the user's network, exactly, and checked before it is uploaded.

    onnx_bytes = export_module(module, example_input)     # raises ExportMismatchError naming what differs

1. Export without folding: torch's TorchScript exporter on the module in eval mode with
   `training=TrainingMode.PRESERVE` and `do_constant_folding=False` (dynamo=True: the
   torch.export-based exporter with `optimize=False`). The exporters' defaults fold an
   eval-mode BatchNorm into the convolution before it (and the dynamo optimiser folds layer
   scales), which changes the parameters; without folding every parameter is an initializer
   under its own name.
2. Buffers become constants: an initializer that is not one of the module's trainable
   parameters (a float buffer, a parameter with requires_grad=False) is rewritten as a
   Constant node, so the service's rule (ntklab.api_schemas.uploads.trainable_initializers) counts
   exactly `[p for p in module.parameters() if p.requires_grad]`.
3. Parameters checked: the trainable initializers are the module's trainable parameters one
   for one, by name and shape.
4. Outputs checked: the network is converted here as the worker will convert it (the
   worker's own converter, ntklab.engine.nets.onnx_model, when the `[worker]` extra is installed;
   otherwise onnx.reference.ReferenceEvaluator) and its outputs on the example input equal
   module(example): |Δ| ≤ rtol·max|y| with rtol 1e-6 in float64 and 1e-4 in float32 (RTOL says why).

torch, onnx and the worker's converter are optional dependencies of the client
(pip install 'ntklab[torch]'), imported when a module is exported.
"""

from __future__ import annotations

import importlib
import io
from typing import Any

import numpy as np

from ntklab.api_schemas.uploads import trainable_initializers
from ntklab.errors import ExportMismatchError

RTOL = {"float64": 1e-6, "float32": 1e-4, "float16": 1e-2}
"""|Δ| ≤ RTOL·max|y| by the module's output dtype. float64 is 1e-6, not 1e-12: Hugging Face's RMSNorm, T5's
LayerNorm and rotary tables compute in float32 on purpose even in a float64 module, while the converted
network runs every float cast in the job's dtype (measured: Llama, Mistral 1e-8, T5 3e-8 of max |y|); a
folded or missing layer moves the outputs by 1e-2 or more (a folded BatchNorm: 3.5 %)."""
CHECK_MODEL_ID = "mdl_" + "0" * 32


def export_module(module: Any, example_input: Any, *, dynamo: bool = False, opset_version: int | None = None) -> bytes:
    """The ONNX bytes of `module` (in eval mode) traced on `example_input` [batch, ...], with a dynamic batch axis,
    proven to have the module's trainable parameters and outputs (module docstring); ExportMismatchError if not."""
    torch, onnx = _import("torch"), _import("onnx")
    example = example_input if isinstance(example_input, torch.Tensor) else torch.as_tensor(example_input)
    if example.dim() < 2:
        raise ValueError(f"example_input must be a batch [batch, ...]; it has shape {list(example.shape)}")
    if example.shape[0] == 1:
        example = torch.cat([example, example])  # a batch of one would be taken for a constant axis
    training = module.training
    module.eval()
    try:
        proto = onnx.load_from_string(_export(torch, module, example, dynamo, opset_version))
        aliases = parameter_aliases(module)
        buffers_as_constants(proto, set(aliases))
        check_parameters(proto, aliases)
        with torch.no_grad():
            expected = module(example)
        check_outputs(proto, example, expected)
    finally:
        module.train(training)
    return bytes(proto.SerializeToString())


def _export(torch: Any, module: Any, example: Any, dynamo: bool, opset_version: int | None) -> bytes:
    if dynamo:
        batch = torch.export.Dim("batch", min=1)
        program = torch.onnx.export(
            module,
            (example,),
            dynamo=True,
            input_names=["x"],
            output_names=["y"],
            dynamic_shapes=({0: batch},),
            opset_version=opset_version,
            optimize=False,
        )
        return bytes(program.model_proto.SerializeToString())
    buffer = io.BytesIO()
    torch.onnx.export(
        module,
        (example,),
        buffer,
        dynamo=False,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        opset_version=opset_version,
        training=torch.onnx.TrainingMode.PRESERVE,
        do_constant_folding=False,
        keep_initializers_as_inputs=True,
    )  # else equal initializers (fresh LayerNorms) are merged: tied
    return buffer.getvalue()


def buffers_as_constants(proto: Any, parameter_names: set[str]) -> None:
    """Rewrite every initializer the service would count as trainable but the module does not (float buffers,
    frozen parameters) as a Constant node producing the same name, in place."""
    onnx = _import("onnx")
    graph = proto.graph
    names = {name for name, _ in trainable_initializers(graph)} - parameter_names
    if not names:
        return
    moved = [tensor for tensor in graph.initializer if tensor.name in names]
    kept = [tensor for tensor in graph.initializer if tensor.name not in names]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    inputs = [value for value in graph.input if value.name not in names]
    del graph.input[:]
    graph.input.extend(inputs)
    constants = [
        onnx.helper.make_node("Constant", [], [tensor.name], name=f"/constant/{tensor.name}", value=tensor)
        for tensor in moved
    ]
    nodes = constants + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)


def parameter_aliases(module: Any) -> dict[str, tuple[str, list[int]]]:
    """Every name of every trainable parameter → (its first name, its shape); a tied parameter has several names."""
    first: dict[int, str] = {}
    aliases: dict[str, tuple[str, list[int]]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            aliases[name] = (first.setdefault(id(p), name), list(p.shape))
    return aliases


def check_parameters(proto: Any, aliases: dict[str, tuple[str, list[int]]]) -> None:
    """The export's trainable initializers are the module's trainable parameters one for one (by any of a tied
    parameter's names, and shape); else ExportMismatchError naming what differs."""
    exported = dict(trainable_initializers(proto.graph))
    wanted = {canonical: shape for canonical, shape in aliases.values()}
    found: dict[str, list[str]] = {}
    for name in exported:
        if name in aliases:
            found.setdefault(aliases[name][0], []).append(name)
    missing = sorted(set(wanted) - set(found))
    extra = sorted(name for name in exported if name not in aliases)
    untied = sorted(f"{canonical} ({', '.join(names)})" for canonical, names in found.items() if len(names) > 1)
    reshaped = [
        (names[0], wanted[canonical], exported[names[0]])
        for canonical, names in found.items()
        if exported[names[0]] != wanted[canonical]
    ]
    if not (missing or extra or reshaped or untied):
        return
    count = sum(int(np.prod(shape)) for shape in exported.values())
    total = sum(int(np.prod(shape)) for shape in wanted.values())
    parts = [
        f"the export has {count} trainable parameters in {len(exported)} tensors; the module {total} in {len(wanted)}"
    ]
    for label, names in (
        ("missing from the export", missing),
        ("in the export only", extra),
        ("tied in the module, separate in the export", untied),
    ):
        if names:
            parts.append(f"{label}: {', '.join(names[:12])}" + (" …" if len(names) > 12 else ""))
    if reshaped:
        parts.append("other shapes: " + ", ".join(f"{name} {a} → {b}" for name, a, b in reshaped[:12]))
    raise ExportMismatchError(
        "the exported ONNX model is not the module's network: "
        + "; ".join(parts)
        + " (a folded layer, e.g. BatchNorm into a convolution, shows as both missing and extra)",
        missing=missing,
        extra=extra,
        reshaped=reshaped,
    )


def check_outputs(proto: Any, example: Any, expected: Any) -> None:
    """The converted network's outputs on `example` equal `expected` (the module's), to the dtype's tolerance."""
    got = converted_outputs(proto, example, expected.dtype)
    want = expected.detach().cpu().numpy()
    if got.shape != want.shape:
        raise ExportMismatchError(
            f"the exported network gives outputs of shape {list(got.shape)}; the module {list(want.shape)}"
        )
    rtol = RTOL.get(str(want.dtype), 1e-4)
    difference = float(np.max(np.abs(got - want))) if want.size else 0.0
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    if not np.isfinite(difference) or difference > rtol * scale:
        raise ExportMismatchError(
            f"the exported network's outputs differ from the module's on example_input: "
            f"max |Δ| = {difference:.3g} against max |y| = {scale:.3g} (tolerance {rtol:g} relative)",
            max_difference=difference,
        )


def converted_outputs(proto: Any, example: Any, dtype: Any) -> np.ndarray:
    """Outputs on `example` of the network as the worker builds it (its converter, if installed), else of the reference evaluator."""
    try:
        converter = importlib.import_module("ntklab.engine.nets.onnx_model")
        spec = importlib.import_module("ntklab.api_schemas.spec")
    except ImportError:
        return reference_outputs(proto, example)
    torch = _import("torch")
    output_dim = int(proto.graph.output[0].type.tensor_type.shape.dim[-1].dim_value or 1)
    model = spec.OnnxModel(id=CHECK_MODEL_ID, output_dim=output_dim)
    float_dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    net = converter.build_onnx_network(model, proto.SerializeToString(), dtype=float_dtype)
    with torch.no_grad():
        return np.asarray(net(example).cpu().numpy())


def reference_outputs(proto: Any, example: Any) -> np.ndarray:
    """Outputs on `example` by onnx.reference.ReferenceEvaluator (a client without the worker's converter)."""
    reference = _import("onnx.reference")
    name = next(
        value.name for value in proto.graph.input if value.name not in {t.name for t in proto.graph.initializer}
    )
    return np.asarray(reference.ReferenceEvaluator(proto).run(None, {name: example.cpu().numpy()})[0])


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(
            f"exporting a torch module needs torch and onnx: pip install 'ntklab[torch]' ({error})"
        ) from error

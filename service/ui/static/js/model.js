// A job's model in words, from its spec's `model` (docs/api.md): the line the job page states and the short one the
// Jobs table shows. An uploaded ONNX model is named by its upload's name (GET /v1/models/{id}, read once per id).

import { getJson } from "./api.js";
import { fmt } from "./dom.js";

const uploads = new Map();

/** The name an uploaded model was given (its id when it has none or is gone), read once per id. */
export function uploadName(id) {
  if (!uploads.has(id)) uploads.set(id, getJson(`/v1/models/${encodeURIComponent(id)}`).then((m) => m.name || id, () => id));
  return uploads.get(id);
}

const head = (phi) => (phi === "identity" ? "linear head" : `${phi} head`);

/** "relu" when every hidden layer has it, else the activations in layer order. */
function activations(model) {
  const list = [model.activation].flat();
  return new Set(list).size === 1 ? list[0] : list.join(", ");
}

/** A graph's layers in order, each as its type and width (an activation layer as its function). */
function layerWords(layers) {
  return layers.map((layer) => {
    if (layer.type === "residual") return `residual(${layerWords(layer.layers)})`;
    if (layer.type === "activation") return layer.name;
    return layer.width ? `${layer.type} ${layer.width}` : layer.type;
  }).join(" → ");
}

/** What the network is, by kind: widths and activations, or the graph's layers, or the upload's name. */
function body(model, upload) {
  const act = activations(model);
  switch (model.kind) {
    case "mlp": return `mlp, hidden widths ${model.hidden.join(", ")}, ${act}`;
    case "cnn": return `cnn, channels ${model.hidden.join(", ")}, ${model.kernel_size}×${model.kernel_size} kernels, ${act}, ${model.readout} readout`;
    case "resnet": return `resnet, ${model.blocks} ${model.block} blocks of width ${model.hidden[0]}, ${act}`;
    case "graph": return `graph: ${layerWords(model.layers)}`;
    case "onnx": return `ONNX upload “${upload ?? model.id}”`;
    default: return model.kind;
  }
}

/** The job page's line: "mlp, hidden widths 64, relu, swish head, ntk parameterization, 1 output, 450 parameters". */
export function describeModel(model, parameters, upload) {
  const parts = [body(model, upload), head(model.output_activation)];
  if (model.kind !== "onnx") parts.push(`${model.parameterization} parameterization`);
  if (model.output_dim) parts.push(`${model.output_dim} output${model.output_dim === 1 ? "" : "s"}`);
  parts.push(`${fmt(parameters)} parameters`);
  return parts.join(", ");
}

/** The Jobs table's cell: "mlp 64 relu → swish", "resnet 2×64 tanh", "graph, 5 layers", "onnx “name”". */
export function shortModel(model, upload) {
  const act = activations(model);
  const net = {
    mlp: () => `mlp ${model.hidden.join("-")} ${act}`,
    cnn: () => `cnn ${model.hidden.join("-")} ${act}`,
    resnet: () => `resnet ${model.blocks}×${model.hidden[0]} ${act}`,
    graph: () => `graph, ${model.layers.length} layers`,
    onnx: () => `onnx “${upload ?? model.id}”`,
  }[model.kind]?.() ?? model.kind;
  return model.output_activation === "identity" ? net : `${net} → ${model.output_activation}`;
}

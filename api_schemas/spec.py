"""The job spec: what to build, what to train it on, how to train it, what to measure.

These pydantic models are the wire contract read by the service and by the engine.
Every model forbids unknown fields and bounds every number with an absolute sanity
limit; the service applies its own (configurable, smaller) resource caps on top.
Cross-field rules raise errors whose message names the dotted field path.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, TypeAdapter, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from ntklab.api_schemas.base import MAX_LAYERS, MAX_WIDTH, Activation, Name, Strict, Tag
from ntklab.api_schemas.graph import MAX_NESTING, Embedding, GraphLayer, too_deep
from ntklab.api_schemas.graph_plan import plan_graph
from ntklab.api_schemas.infinite_width import refusal
from ntklab.api_schemas.tagged_union import tagged_union

OutputActivation = Literal["identity", "swish", "tanh", "sigmoid", "softmax"]
Parameterization = Literal["ntk", "standard", "meanfield", "mup"]
BUILTIN_PARAMETERIZATIONS = ("ntk", "standard", "meanfield")
ONNX_PARAMETERIZATIONS = ("standard", "ntk", "mup")
BuiltinDataset = Literal["digits", "iris", "breast_cancer", "two_moons"]
Targets = Literal["onehot", "label", "signed"]

MAX_POINTS = 1_000_000
MAX_INPUT_DIM = 100_000
MAX_STEPS = 10_000_000

BUILTIN_CLASSES: dict[str, int] = {"digits": 10, "iris": 3, "breast_cancer": 2, "two_moons": 2}
BUILTIN_INPUT_DIM: dict[str, int] = {"digits": 64, "iris": 4, "breast_cancer": 30, "two_moons": 2}
BUILTIN_IMAGE_SHAPE: dict[str, tuple[int, int, int]] = {"digits": (1, 8, 8)}
BUILTIN_POINTS: dict[str, int] = {"digits": 1797, "iris": 150, "breast_cancer": 569}  # two_moons is generated


# --------------------------------------------------------------------------- model


class StoredModel(Strict):
    """What the service read from an uploaded ONNX model when the job was submitted."""

    parameters: int = Field(ge=0, description="trainable parameters (elements of the floating-point initializers)")
    input_shape: list[Annotated[int, Field(ge=1)]] = Field(
        description="one input point's shape (the batch axis left out)"
    )
    output_dim: int = Field(ge=1, description="the model's output width O")
    input_integer: bool = Field(default=False, description="the model takes integer inputs (token ids)")
    activation_elements: int | None = Field(
        default=None, ge=0, description="one example's activation elements, counted at upload"
    )
    forward_flops: int | None = Field(default=None, ge=0, description="one example's forward FLOPs, counted at upload")
    constant_bytes: int | None = Field(
        default=None,
        ge=0,
        description="bytes of the values the graph computes from constants alone, folded once at "
        "conversion and held for the job (floats at 8 bytes), counted at upload; null for models uploaded before it was",
    )
    constant_elements: int | None = Field(default=None, ge=0, description="the floating-point elements among them")
    folding_flops: int | None = Field(default=None, ge=0, description="FLOPs of folding them, once per conversion")
    fixed_elements: int | None = Field(
        default=None,
        ge=0,
        description="elements of the nodes that run on every forward pass whatever the batch "
        "(computed from weights, not from the input), counted at upload",
    )
    fixed_flops: int | None = Field(default=None, ge=0, description="their FLOPs per forward pass")
    input_vocabulary: int | None = Field(
        default=None,
        ge=1,
        description="an integer input's ids must lie in [0, input_vocabulary): the least row count "
        "of the embedding tables that read the input, found at upload; null when none reads it directly",
    )
    nodes: int | None = Field(
        default=None,
        ge=0,
        description="the graph's nodes, each a framework operation or a few on every forward pass "
        "(the estimate's per-node time), counted at upload; null for models uploaded before they were: the estimate "
        "then takes 10 000, the default max_model_nodes",
    )


class ModelCommon(Strict):
    """What every kind of network shares: the output head φ (identity = linear head), the output
    width O, the parameterization and the readout's bias and training.

    parameterization: ntk, standard or meanfield for the built-in kinds and graphs (weights drawn
    for it); standard (the default: as exported), ntk or mup for an onnx model, whose exported
    weights are rescaled by their fan-in so that the function at init is the one exported
    (engine/nets/onnx_parameterization.py, docs/models.md).

    A section may carry the fields of another kind (a whole stored spec of the old flat model,
    a sweep's base over several kinds): those are left out before validation, as they were
    ignored before; only `layers`, `id` and `stored` of another kind are refused when set.
    """

    PARAMETERIZATIONS: ClassVar[tuple[str, ...]] = BUILTIN_PARAMETERIZATIONS

    kind: str  # each member's Literal; declared here so that it leads every member's fields
    output_activation: OutputActivation = "identity"
    output_dim: int | None = Field(default=None, ge=1, le=10_000, description="default: the data's target width")
    parameterization: Parameterization = "ntk"
    bias: bool = True
    train_output_layer: bool = True
    layers: SkipJsonSchema[None] = Field(default=None, exclude=True)  # a graph's own; here only to be refused by name

    @field_validator("layers", mode="before")
    @classmethod
    def _layers_for_graphs_only(cls, layers: Any) -> Any:
        """`model.layers` on another kind is refused at that field, as the flat model did (GraphModel overrides it)."""
        kind = cls.model_fields["kind"].default
        if layers is not None and kind != "graph":
            raise ValueError(f"model.layers is for model.kind = 'graph' only (this model is {kind!r})")
        return layers

    @model_validator(mode="before")
    @classmethod
    def _without_other_kinds_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kind = data.get("kind", DEFAULT_MODEL_KIND)
        foreign = [name for name in data if name not in cls.model_fields and name in _every_model_field()]
        for name in foreign:
            if name in KIND_OF_FIELD and data[name] is not None:
                owner = KIND_OF_FIELD[name]
                raise ValueError(f"model.{name} is for model.kind = {owner!r} only (this model is {kind!r})")
        return {name: value for name, value in data.items() if name not in foreign}

    @field_validator("parameterization")
    @classmethod
    def _parameterization_of_the_kind(cls, value: str) -> str:
        if value not in cls.PARAMETERIZATIONS:
            choices = ", ".join(repr(name) for name in cls.PARAMETERIZATIONS)
            kind = cls.model_fields["kind"].default
            raise ValueError(f"{value!r} is not a parameterization of model.kind = {kind!r}: one of {choices}")
        return value

    @field_validator("output_dim")
    @classmethod
    def _softmax_needs_classes(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("output_activation") == "softmax" and value < 2:
            raise ValueError("model.output_dim must be at least 2 with a softmax head (softmax of one logit is 1)")
        return value


class BuiltinModel(ModelCommon):
    """The shorthand kinds (mlp, cnn, resnet): hidden widths and their activations, lowered to a layer
    graph after validation (planner/builtin_graphs.py)."""

    hidden: list[Annotated[int, Field(ge=1, le=MAX_WIDTH)]] = Field(
        default_factory=lambda: [1000],
        min_length=1,
        max_length=MAX_LAYERS,
        description="Hidden widths (mlp), channels (cnn) or the residual width (resnet).",
    )
    activation: Activation | list[Activation] = "relu"
    input_shape: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(
        default=None,
        min_length=1,
        max_length=3,
        description="(C, H, W) of the inputs; cnn/conv-resnet default: the data set's image shape",
    )

    @field_validator("input_shape")
    @classmethod
    def _image_shape(cls, shape: list[int] | None) -> list[int] | None:
        if shape is not None and len(shape) != 3:
            kind = cls.model_fields["kind"].default
            raise ValueError(f"model.input_shape must be (C, H, W) for model.kind = {kind!r}, got {shape}")
        return shape

    @field_validator("activation")
    @classmethod
    def _one_activation_per_layer(cls, value: Activation | list[Activation], info: ValidationInfo):
        hidden = info.data.get("hidden")
        if isinstance(value, list) and hidden is not None and len(value) != len(hidden):
            raise ValueError(
                f"model.activation lists {len(value)} activations but model.hidden has {len(hidden)} layers"
            )
        return value

    def activations(self) -> list[Activation]:
        """One activation name per hidden layer."""
        if isinstance(self.activation, list):
            return list(self.activation)
        return [self.activation] * len(self.hidden)


class MlpModel(BuiltinModel):
    """mlp: dense layers of the hidden widths, one activation for all hidden layers or one per layer."""

    kind: Literal["mlp"] = "mlp"


class ConvModel(BuiltinModel):
    """The convolution of a cnn or conv-resnet layer and the readout after the last."""

    kernel_size: int = Field(default=3, ge=1, le=15, description="conv layers' kernel size")
    stride: int = Field(default=1, ge=1, le=8, description="conv layers' stride")
    padding: int = Field(default=1, ge=0, le=15, description="conv layers' zero padding")
    readout: Literal["global_avg", "flatten"] = Field(
        default="global_avg", description="conv layers: global average pooling or flattening before the readout"
    )


class CnnModel(ConvModel):
    """cnn: hidden = channels per conv layer, on inputs of input_shape (C, H, W)."""

    kind: Literal["cnn"] = "cnn"


class ResnetModel(ConvModel):
    """resnet: hidden = [width] * (blocks + 1); block = "fc" (dense) or "conv" (the conv fields apply)."""

    kind: Literal["resnet"] = "resnet"
    blocks: int = Field(default=2, ge=1, le=MAX_LAYERS, description="residual blocks")
    block: Literal["fc", "conv"] = "fc"


class GraphModel(ModelCommon):
    """graph: `layers`, a list of layer specs (api_schemas/graph.py, docs/models.md) read from inputs of
    model.input_shape ([d], [T, d] or [C, H, W]; default the flat features), then the readout."""

    kind: Literal["graph"] = "graph"
    layers: list[GraphLayer] = Field(min_length=1, max_length=MAX_LAYERS, description="the layers before the readout")
    input_shape: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(
        default=None, min_length=1, max_length=3, description="[d], [T, d] or [C, H, W]; default the flat features"
    )

    @model_validator(mode="before")
    @classmethod
    def _layers_required(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("layers") is None:
            raise ValueError("model.layers is required for model.kind = 'graph'")
        return data

    @field_validator("layers", mode="before")
    @classmethod
    def _nested_at_most_max_nesting(cls, layers):
        if (path := too_deep(layers)) is not None:
            raise PydanticCustomError(
                "nesting_too_deep",
                "{path} is a residual nested {depth} deep; residual layers nest at most {le} deep",
                {"path": path, "depth": MAX_NESTING + 1, "le": MAX_NESTING},
            )
        return layers


class OnnxModel(ModelCommon):
    """onnx: an uploaded ONNX model (POST /v1/models) named by `id`; its initializers are the trainable
    weights; `stored` is filled in by the service at submission."""

    PARAMETERIZATIONS: ClassVar[tuple[str, ...]] = ONNX_PARAMETERIZATIONS

    kind: Literal["onnx"] = "onnx"
    id: str = Field(pattern=r"^mdl_[0-9a-f]{32}$", description="the id POST /v1/models answered")
    parameterization: Parameterization = "standard"
    stored: StoredModel | None = Field(
        default=None, description="filled in by the service at submission (a value sent is replaced)"
    )

    @model_validator(mode="before")
    @classmethod
    def _id_required(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("id") is None:
            raise ValueError("model.id is required for model.kind = 'onnx': the id POST /v1/models answered")
        return data

    @model_validator(mode="after")
    def _stored_outputs(self):
        if not self.train_output_layer:
            raise ValueError(
                "model.train_output_layer = false is not supported for an onnx model (every initializer trains)"
            )
        if self.stored is not None:
            if self.output_dim is not None and self.output_dim != self.stored.output_dim:
                raise ValueError(
                    f"model.output_dim = {self.output_dim} but the onnx model has {self.stored.output_dim} outputs"
                )
            self.output_dim = self.stored.output_dim
        return self


DEFAULT_MODEL_KIND = "mlp"
MODEL_KINDS: dict[str, type[ModelCommon]] = {
    "mlp": MlpModel,
    "cnn": CnnModel,
    "resnet": ResnetModel,
    "graph": GraphModel,
    "onnx": OnnxModel,
}
KIND_OF_FIELD = {"id": "onnx", "stored": "onnx"}
"""Fields of one kind that another kind refuses when set (not None); every other kind's field is left out."""

ModelSpec = tagged_union(MODEL_KINDS, "kind", default=DEFAULT_MODEL_KIND)
"""The model section; a section that leaves `kind` out is an mlp. Build one with model_spec(**fields)."""

AnyModel = MlpModel | CnnModel | ResnetModel | GraphModel | OnnxModel
"""The members of ModelSpec, for annotations and isinstance."""


@cache
def _every_model_field() -> frozenset[str]:
    return frozenset(name for member in MODEL_KINDS.values() for name in member.model_fields)


@cache
def _model_adapter() -> TypeAdapter:
    return TypeAdapter(ModelSpec)


def model_spec(**fields: Any) -> AnyModel:
    """The model section of `fields`, validated: its kind's member (an mlp where `kind` is left out)."""
    return _model_adapter().validate_python(fields)


# --------------------------------------------------------------------------- data


DEFAULT_PROBE_POINTS = 64
DEFAULT_PROBE_ROWS = 256
"""The default probe set's size: at most 64 points and at most 256 kernel rows n·O (10 outputs: 25 points)."""


class ProbeSpec(Strict):
    """The probe set x₁…x_n on which K and H are measured: the first n training points."""

    n: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="default: min(64, n_train, ⌊256 / O⌋) for O outputs, so that the kernel has at most 256 rows",
    )


class DataCommon(Strict):
    standardize: bool = Field(default=False, description="z-score each input feature on the training set")
    probe: ProbeSpec = Field(default_factory=ProbeSpec)

    def n_points(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def probe_n(self, outputs: int | None = 1) -> int:
        """probe.n, or the default for a model of `outputs` outputs (ProbeSpec)."""
        if self.probe.n is not None:
            return self.probe.n
        return max(1, min(DEFAULT_PROBE_POINTS, self.n_points(), DEFAULT_PROBE_ROWS // (outputs or 1)))

    @model_validator(mode="after")
    def _probe_within_data(self):
        if self.probe.n is not None and self.probe.n > self.n_points():
            raise ValueError(f"data.probe.n = {self.probe.n} exceeds the {self.n_points()} training points")
        return self


class GaussianMixtureData(DataCommon):
    """k classes with uniform labels; x | y ~ N(μ_y, σ² I), μ_k ~ N(0, mean_scale² I / d)·√d."""

    kind: Literal["gaussian_mixture"] = "gaussian_mixture"
    n_train: int = Field(default=64, ge=1, le=MAX_POINTS)
    input_dim: int = Field(default=16, ge=1, le=MAX_INPUT_DIM)
    classes: int = Field(default=2, ge=2, le=1000)
    sigma: float = Field(default=1.0, gt=0, le=1e3)
    mean_scale: float = Field(default=1.0, ge=0, le=1e3)
    targets: Targets = "onehot"
    seed: int = Field(default=0, ge=0, le=2**31 - 1)

    def n_points(self) -> int:
        return self.n_train


class Sine1DData(DataCommon):
    """The 1-d warm-up of the paper's section 3.1: x ~ U[-π, π], y = sin(frequency·x) + noise."""

    kind: Literal["sine1d"] = "sine1d"
    n_train: int = Field(default=32, ge=1, le=MAX_POINTS)
    frequency: float = Field(default=1.0, gt=0, le=1e3)
    noise: float = Field(default=0.0, ge=0, le=1e3)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)

    def n_points(self) -> int:
        return self.n_train


class BuiltinData(DataCommon):
    """Data that ships with scikit-learn (no download): digits (8×8 images), iris, breast_cancer, two_moons."""

    kind: Literal["builtin"] = "builtin"
    name: BuiltinDataset = "digits"
    n_train: int = Field(default=256, ge=1, le=MAX_POINTS)
    targets: Targets = "onehot"
    seed: int = Field(default=0, ge=0, le=2**31 - 1)

    def n_points(self) -> int:
        return self.n_train

    @field_validator("n_train")
    @classmethod
    def _within_the_data_set(cls, n_train: int, info: ValidationInfo) -> int:
        available = BUILTIN_POINTS.get(info.data.get("name", ""))
        if available is not None and n_train > available:
            raise ValueError(f"data.n_train = {n_train} but {info.data['name']} has {available} points")
        return n_train


class InlineData(DataCommon):
    """Arrays in the request: x is n × d, y is n × O (or n scalars)."""

    kind: Literal["inline"] = "inline"
    x: list[list[float]] = Field(min_length=1)
    y: list[list[float]] | list[float] = Field(min_length=1)

    @field_validator("x")
    @classmethod
    def _rectangular_x(cls, x: list[list[float]]) -> list[list[float]]:
        width = len(x[0])
        if width == 0 or any(len(row) != width for row in x):
            raise ValueError("data.x must be a non-empty rectangular n × d array")
        return x

    @field_validator("y")
    @classmethod
    def _y_matches_x(cls, y, info: ValidationInfo):
        x = info.data.get("x")
        if x is not None and len(y) != len(x):
            raise ValueError(f"data.y has {len(y)} rows but data.x has {len(x)}")
        if y and isinstance(y[0], list):
            width = len(y[0])
            if width == 0 or any(len(row) != width for row in y):
                raise ValueError("data.y must be rectangular")
        return y

    def n_points(self) -> int:
        return len(self.x)


class StoredDataset(Strict):
    """What the service found in an uploaded data set when the job was submitted."""

    points: int = Field(ge=1, description="points stored")
    x_shape: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, description="one point's x shape")
    x_integer: bool = Field(
        description="x holds integers: kept as int64 (token ids) for a model that takes them, else cast to float"
    )
    y_width: int = Field(ge=1, description="target width O (y [points] counts as width 1)")
    x_min: int | None = Field(default=None, description="an integer x's smallest value (token ids), read at upload")
    x_max: int | None = Field(default=None, description="an integer x's largest value (token ids), read at upload")
    y_integer: bool = Field(default=False, description="y holds integers: in one column, class labels c_i ∈ [0, C)")
    y_min: int | None = Field(default=None, description="an integer y's smallest value (class labels), read at upload")
    y_max: int | None = Field(default=None, description="an integer y's largest value (class labels), read at upload")

    def class_labels(self) -> bool:
        """Whether y is integer class labels: integers in one column, y [points] (or [points, 1])."""
        return self.y_integer and self.y_width == 1


class DatasetData(DataCommon):
    """An uploaded data set (POST /v1/datasets): its first n_train points; `stored` is filled in by the service."""

    kind: Literal["dataset"] = "dataset"
    id: str = Field(pattern=r"^ds_[0-9a-f]{32}$", description="the id POST /v1/datasets answered")
    n_train: int | None = Field(default=None, ge=1, le=MAX_POINTS, description="the first n_train points; default: all")
    stored: StoredDataset | None = Field(
        default=None, description="filled in by the service at submission (a value sent is replaced)"
    )

    def n_points(self) -> int:
        if self.n_train is not None:
            return self.n_train
        return self.stored.points if self.stored is not None else MAX_POINTS

    @model_validator(mode="after")
    def _within_the_stored_points(self):
        if self.stored is not None and self.n_points() > self.stored.points:
            raise ValueError(f"data.n_train = {self.n_train} but data set {self.id} has {self.stored.points} points")
        return self


DataSpec = tagged_union(
    {
        "gaussian_mixture": GaussianMixtureData,
        "sine1d": Sine1DData,
        "builtin": BuiltinData,
        "inline": InlineData,
        "dataset": DatasetData,
    },
    "kind",
    default="gaussian_mixture",
)
"""The data section; a section that leaves `kind` out is a gaussian_mixture, the default data."""


def target_dim(data: GaussianMixtureData | Sine1DData | BuiltinData | InlineData | DatasetData) -> int:
    """Width O of the regression/classification target the data produces."""
    if isinstance(data, DatasetData):
        return _stored(data).y_width
    if isinstance(data, InlineData):
        return len(data.y[0]) if isinstance(data.y[0], list) else 1
    if isinstance(data, Sine1DData):
        return 1
    classes = data.classes if isinstance(data, GaussianMixtureData) else BUILTIN_CLASSES[data.name]
    return classes if data.targets == "onehot" else 1


def input_dim(data: GaussianMixtureData | Sine1DData | BuiltinData | InlineData | DatasetData) -> int:
    if isinstance(data, DatasetData):
        return math.prod(_stored(data).x_shape)
    if isinstance(data, InlineData):
        return len(data.x[0])
    if isinstance(data, Sine1DData):
        return 1
    if isinstance(data, BuiltinData):
        return BUILTIN_INPUT_DIM[data.name]
    return data.input_dim


def class_labels(data) -> bool:
    """Whether the data's targets are integer class labels [n] (an uploaded integer y in one column), for which
    the model's output width is the number of classes C rather than the targets' width."""
    return isinstance(data, DatasetData) and data.stored is not None and data.stored.class_labels()


def label_classes(data: DatasetData) -> int:
    """The default class count C = y_max + 1 of an uploaded data set of class labels."""
    stored = _stored(data)
    if stored.y_max is None:
        raise ValueError(
            f"model.output_dim is required: data set {data.id} holds integer class labels whose range "
            "was not recorded at upload; set it to the number of classes"
        )
    return max(stored.y_max + 1, 1)


def _stored(data: DatasetData) -> StoredDataset:
    if data.stored is None:
        raise ValueError(f"data set {data.id} has not been looked up yet (the service fills in data.stored)")
    return data.stored


# --------------------------------------------------------------------------- training


class TrainingSpec(Strict):
    """Optimisation of the loss over the training set.

    mse: L = (1/2n) Σ_i ‖φ(f(x_i)) − y_i‖²;  cross_entropy: L = −(1/n) Σ_i Σ_a y_ia log softmax(f(x_i))_a
    for targets y [n, C] (one-hot or probabilities), L = −(1/n) Σ_i log softmax(f(x_i))_{c_i} for integer
    class labels c [n] of an uploaded data set (mse refuses those).
    lr = "auto": 1/λ_max of the Gauss–Newton loss Hessian estimated from the kernel at init.
    """

    optimizer: Literal["gd", "sgd", "momentum", "adam"] = "gd"
    loss: Literal["mse", "cross_entropy"] = "mse"
    lr: Annotated[float, Field(gt=0, le=1e6)] | Literal["auto"] = "auto"
    momentum: float = Field(default=0.9, ge=0, lt=1)
    max_steps: int = Field(default=5000, ge=0, le=MAX_STEPS)
    target_loss: float | None = Field(default=1e-3, ge=0)
    batch_size: int | None = Field(default=None, ge=1, le=MAX_POINTS, description="sgd/momentum/adam minibatch")
    time_budget_s: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)


# --------------------------------------------------------------------------- diagnostics


STEPS_PER_DEFAULT_POINT = 50
DEFAULT_POINTS_RANGE = (8, 50)
"""The log schedule's default: one point per 50 training steps, at least 8 and at most 50."""


class KernelDiagnostics(Strict):
    """Tangent kernel K(w_t) on the probe set, recorded on a schedule of steps."""

    schedule: Literal["log", "every"] = "log"
    points: int | None = Field(
        default=None,
        ge=2,
        le=10_000,
        description="log schedule: number of log-spaced steps; default min(50, max(8, ⌈max_steps / 50⌉)), so that "
        "a short run is not measured more often than it trains",
    )
    every: int | None = Field(default=None, ge=1, le=MAX_STEPS, description="every schedule: record every N steps")
    method: Literal["auto", "structured", "jacobian", "ntk_vp"] = "auto"

    def log_points(self, max_steps: int) -> int:
        """The log schedule's `points`, or its default for a run of max_steps steps."""
        if self.points is not None:
            return self.points
        low, high = DEFAULT_POINTS_RANGE
        return min(high, max(low, math.ceil(max_steps / STEPS_PER_DEFAULT_POINT)))

    @field_validator("every")
    @classmethod
    def _every_needs_period(cls, every: int | None, info: ValidationInfo) -> int | None:
        if info.data.get("schedule") == "every" and every is None:
            raise ValueError("diagnostics.kernel.every is required when schedule = 'every'")
        return every


class HessianDiagnostics(Strict):
    """Top-k eigenvalues of the model Hessian ∇²_w f_a(w; x_i) with error bounds, per probe point and measured
    output (Lanczos on batched Hessian-vector products; a dense eigendecomposition when p ≤ iterations).

    The defaults measure hessian_norm = max over the first 4 probe points of ‖∇²_w f_0(w; x_i)‖₂, the first
    output's, certified to 10⁻³ relative: a few dozen products per point (docs/diagnostics.md, "Model Hessian")."""

    at: list[Literal["init", "final", "schedule"]] = Field(default_factory=lambda: ["init", "final"], max_length=3)
    top_k: int = Field(default=1, ge=1, le=20)
    probe_points: int = Field(default=4, ge=1, le=256, description="the first `probe_points` probe points")
    outputs: int | None = Field(
        default=1,
        ge=1,
        le=10_000,
        description="the first `outputs` outputs a of each probe point (null: every output); each costs a Lanczos run",
    )
    iterations: int = Field(
        default=100, ge=4, le=500, description="cap on Lanczos steps (Hessian-vector products) per point and output"
    )
    tolerance: float = Field(
        default=1e-3,
        ge=0,
        le=1,
        description="relative: a run stops once each top-k Ritz value θ has residual bound ≤ tolerance·|θ| "
        "(0: run to the cap); 10⁻³ certifies in 13–33 products on the networks of docs/benchmarks.md",
    )


NORM_TOLERANCE = "a Lanczos norm stops when its residual bound is ≤ tolerance·|θ| (0: every step)"


class HessianSpectrumDiagnostics(Strict):
    """Hutchinson trace, spectral density by stochastic Lanczos quadrature and per-layer block norms.

    of = model: ∇²_w f_a(w; x_i) of the outputs φ(f) for the first `points` probe points and every
    output a; of = loss: ∇²L(w) over the training set.
    """

    of: Literal["model", "loss"] = "loss"
    at: list[Literal["init", "final"]] = Field(default_factory=lambda: ["init", "final"], min_length=1, max_length=2)
    points: int = Field(default=1, ge=1, le=256, description="of = model: the first `points` probe points")
    probes: int = Field(default=16, ge=1, le=1000, description="Rademacher vectors: Hutchinson samples and SLQ starts")
    lanczos_steps: int = Field(
        default=32, ge=1, le=500, description="Lanczos steps per probe (SLQ nodes) and per block"
    )
    grid: int = Field(default=200, ge=2, le=10_000, description="points of the Gaussian-smoothed density")
    bins: int = Field(default=50, ge=1, le=10_000, description="histogram bins of the quadrature's mass")
    bandwidth: float = Field(
        default=0.01, gt=0, le=1, description="the smoothing Gaussian's σ over the spectrum's spread"
    )
    block_norms: bool = Field(default=True, description="‖·‖₂ of the diagonal block of each parameter group")
    tolerance: float = Field(default=1e-6, ge=0, le=1, description=NORM_TOLERANCE)


MAX_LOSS_KERNEL_ROWS = 4096


class LossHessianDiagnostics(Strict):
    """‖∇²L‖, its Gauss–Newton part ‖G‖, the rest ‖∇²L − G‖ and λ_min(K) on the training set, on the kernel schedule."""

    iterations: int = Field(default=32, ge=4, le=500, description="at most this many Lanczos steps per norm (HVPs)")
    tolerance: float = Field(default=1e-6, ge=0, le=1, description=NORM_TOLERANCE)


class InfiniteWidthDiagnostics(Strict):
    """Θ∞ (NTK) and Σ∞ (NNGP) of the architecture's infinite-width limit on the probe set, and
    ‖K(w) − Θ∞‖_F / ‖Θ∞‖_F of the logits at w₀ and at the end (api_schemas/infinite_width.py: which models)."""

    quadrature_tolerance: float = Field(
        default=1e-10,
        ge=1e-14,
        le=1e-2,
        description="relative accuracy the Gauss–Hermite order is chosen to (activations without a closed form)",
    )


class DiagnosticsSpec(Strict):
    kernel: KernelDiagnostics | None = Field(default_factory=KernelDiagnostics)
    hessian: HessianDiagnostics | None = Field(default_factory=HessianDiagnostics)
    hessian_spectrum: HessianSpectrumDiagnostics | None = None
    loss_hessian: LossHessianDiagnostics | None = None
    infinite_width: InfiniteWidthDiagnostics | None = None
    weight_change: bool = True
    layer_sensitivity: bool = True
    linearization_error: bool = True
    save_kernels: list[Literal["init", "final"]] = Field(default_factory=lambda: ["init", "final"], max_length=2)
    save_weights: bool = True


# --------------------------------------------------------------------------- job


class JobSpec(Strict):
    """One training run and its diagnostics."""

    name: Name | None = None
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    data: DataSpec = Field(default_factory=GaussianMixtureData)
    model: ModelSpec = Field(default_factory=MlpModel)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    diagnostics: DiagnosticsSpec = Field(default_factory=DiagnosticsSpec)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["float32", "float64"] = "float32"

    @field_validator("model")
    @classmethod
    def _model_fits_data(cls, model: AnyModel, info: ValidationInfo) -> AnyModel:
        data = info.data.get("data")
        if data is None or (isinstance(data, DatasetData) and data.stored is None):
            return model
        if isinstance(model, OnnxModel) and model.stored is None:
            return model
        labels = class_labels(data)
        wanted = None if labels else target_dim(data)
        if model.output_dim is None:
            model = model.model_copy(update={"output_dim": label_classes(data) if labels else wanted})
            if model.output_activation == "softmax" and model.output_dim < 2:
                raise ValueError(
                    "model.output_dim must be at least 2 with a softmax head; the data's targets have width 1"
                )
        if wanted is not None and model.output_dim != wanted:
            raise ValueError(f"model.output_dim = {model.output_dim} but the data's targets have width {wanted}")
        if isinstance(model, CnnModel) or (isinstance(model, ResnetModel) and model.block == "conv"):
            shape = model.input_shape or _default_image_shape(data)
            if shape is None:
                raise ValueError("model.input_shape (C, H, W) is required for convolutional models on non-image data")
            if shape[0] * shape[1] * shape[2] != input_dim(data):
                raise ValueError(f"model.input_shape {list(shape)} does not hold the data's {input_dim(data)} features")
        if isinstance(model, GraphModel):
            _graph_fits_data(model, data)
        return model

    @field_validator("training")
    @classmethod
    def _loss_fits_head(cls, training: TrainingSpec, info: ValidationInfo) -> TrainingSpec:
        """Cross-entropy reads ≥ 2 logits; mse regresses on float targets, never on class labels.

        The output width is known once the model and data are: an onnx model or a data set not yet
        looked up leaves model.output_dim None, and the service checks again with `stored` filled in."""
        model, data = info.data.get("model"), info.data.get("data")
        if model is None:
            return training
        if training.loss == "cross_entropy" and model.output_activation not in ("identity", "softmax"):
            raise ValueError("training.loss = 'cross_entropy' needs model.output_activation 'identity' or 'softmax'")
        if model.output_dim is None:
            return training
        if training.loss == "cross_entropy" and model.output_dim < 2:
            raise ValueError(
                "training.loss = 'cross_entropy' needs model.output_dim ≥ 2 (one-hot targets [n, C] "
                "or an uploaded data set's integer class labels [n])"
            )
        if training.loss == "mse" and class_labels(data):
            raise ValueError(
                f"training.loss = 'mse' regresses on float targets, but data set {data.id} holds integer "
                "class labels y [n]: use training.loss = 'cross_entropy', or upload y as floats (one-hot "
                "[n, C], or values [n] to regress on)"
            )
        return training

    @field_validator("diagnostics")
    @classmethod
    def _model_has_a_limit(cls, diagnostics: DiagnosticsSpec, info: ValidationInfo) -> DiagnosticsSpec:
        model = info.data.get("model")
        why = refusal(model) if diagnostics.infinite_width is not None and model is not None else None
        if why is not None:
            raise ValueError(f"diagnostics.infinite_width: {why}")
        return diagnostics

    @field_validator("diagnostics")
    @classmethod
    def _loss_kernel_fits(cls, diagnostics: DiagnosticsSpec, info: ValidationInfo) -> DiagnosticsSpec:
        """diagnostics.loss_hessian takes λ_min of the n_train·O-row kernel on the training set at each step."""
        data, model = info.data.get("data"), info.data.get("model")
        if diagnostics.loss_hessian is None or data is None or model is None:
            return diagnostics
        if isinstance(data, DatasetData) and data.stored is None:
            return diagnostics
        rows = data.n_points() * (model.output_dim or target_dim(data))
        if rows > MAX_LOSS_KERNEL_ROWS:
            raise ValueError(
                f"diagnostics.loss_hessian needs the tangent kernel on the training set, {rows} rows "
                f"(data.n_train × outputs); the limit is {MAX_LOSS_KERNEL_ROWS}"
            )
        return diagnostics

    def probe_n(self) -> int:
        """The probe set's size: data.probe.n, or its default for the model's output width O (ProbeSpec)."""
        stored = self.model.stored.output_dim if isinstance(self.model, OnnxModel) and self.model.stored else None
        return self.data.probe_n(self.model.output_dim or stored or 1)

    def image_shape(self) -> tuple[int, int, int] | None:
        """(C, H, W) of a convolutional model's input, or None for flat inputs."""
        if not isinstance(self.model, OnnxModel) and self.model.input_shape is not None:
            return tuple(self.model.input_shape)  # type: ignore[return-value]
        return _default_image_shape(self.data)


def _graph_fits_data(model: GraphModel, data) -> None:
    """The graph reads the data's points as model.input_shape (or flat); every layer's shapes fit; token ids for an embedding."""
    features = input_dim(data)
    if model.input_shape is not None and math.prod(model.input_shape) != features:
        raise ValueError(f"model.input_shape {model.input_shape} does not hold the data's {features} features")
    plan_graph(model.layers, tuple(model.input_shape or (features,)), bias=model.bias)
    first = model.layers[0]
    if isinstance(first, Embedding) and not _token_ids(data, first.vocab):
        stored = getattr(data, "stored", None)
        held = (
            f"holds ids from {stored.x_min} to {stored.x_max}"
            if stored is not None and stored.x_integer
            else "does not hold them (inline integers, or an uploaded data set of integers)"
        )
        raise ValueError(
            f"model.layers.0 (embedding) reads integer token ids in [0, {first.vocab}); data.kind {data.kind!r} {held}"
        )


def _token_ids(data, vocab: int) -> bool:
    """Whether the data's inputs are integer token ids (below `vocab` where the values are known)."""
    if isinstance(data, InlineData):
        return all(value.is_integer() and 0 <= value < vocab for row in data.x for value in row)
    if not (isinstance(data, DatasetData) and data.stored is not None and data.stored.x_integer):
        return False
    return ids_within(data.stored, vocab)


def ids_within(stored: StoredDataset, vocab: int) -> bool:
    """Whether a stored integer data set's ids lie in [0, vocab) (True where its range was not recorded)."""
    return stored.x_min is None or stored.x_max is None or (stored.x_min >= 0 and stored.x_max < vocab)


def takes_integer_inputs(model: AnyModel) -> bool:
    """Whether the model reads integer inputs (token ids): a graph whose first layer is an embedding,
    or an onnx model whose input is integer; every other model reads floats."""
    if isinstance(model, OnnxModel):
        return model.stored is not None and model.stored.input_integer
    return isinstance(model, GraphModel) and model.layers[0].type == "embedding"


def _default_image_shape(data) -> tuple[int, int, int] | None:
    if isinstance(data, BuiltinData):
        return BUILTIN_IMAGE_SHAPE.get(data.name)
    if isinstance(data, DatasetData) and data.stored is not None and len(data.stored.x_shape) == 3:
        return tuple(data.stored.x_shape)  # type: ignore[return-value]
    return None

"""Training data and the probe set, built deterministically from the job spec.

Every source yields x of shape [n, d] and y of shape [n, O] (float), but for an uploaded data set
whose y is integers in one column: those are class labels c [n] (int64, c_i ∈ [0, O)) for
cross-entropy (engine/training/losses.py; the spec refuses mse on them). Images are then
reshaped to [n, C, H, W] for convolutional models. An uploaded data set (kind "dataset",
arrays passed in an ntklab.engine.uploads.Uploads) keeps each point's shape, is cut to its first
n_train points, and keeps integer x as int64 token ids for a model that takes integers
(ntklab.api_schemas.spec.takes_integer_inputs; float for mlp, cnn and resnet); an ONNX model gets
its points in the shape of its input. Targets of a classification set are

    onehot: y_i = e_{c_i} ∈ {0, 1}^k          (O = k)
    label:  y_i = c_i ∈ {0, …, k−1}           (O = 1)
    signed: y_i = 2 c_i / (k − 1) − 1 ∈ [−1, 1] (O = 1; ±1 for two classes)

Standardization z-scores each input feature with the training set's mean and standard
deviation (a constant feature is only centred). The probe set is the first `probe_n`
training points, after standardization.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn import datasets as sk

from ntklab.api_schemas.spec import (
    BuiltinData,
    CnnModel,
    DatasetData,
    GaussianMixtureData,
    InlineData,
    JobSpec,
    OnnxModel,
    ResnetModel,
    Sine1DData,
    Targets,
    takes_integer_inputs,
)
from ntklab.engine.uploads import NO_UPLOADS, Uploads


@dataclass(frozen=True)
class Dataset:
    """x_train [n, *input_shape], y_train [n, O] (float) or class labels [n] (int64), x_probe [n_probe, *input_shape]."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_probe: torch.Tensor
    input_shape: tuple[int, ...]


def load_data(
    spec: JobSpec, *, uploads: Uploads = NO_UPLOADS, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> Dataset:
    """The spec's training set and probe set as tensors on `device`; an uploaded data set is read from `uploads`."""
    x, y = _arrays(spec.data, uploads)
    integer = x.dtype.kind in "iu" and takes_integer_inputs(spec.model)
    x = x if integer or x.dtype == np.float64 else x.astype(np.float64)
    if spec.data.standardize and not integer:
        x = standardize(x)
    image = spec.image_shape() if _is_convolutional(spec) else None
    if image is not None:
        input_shape = tuple(image)
    elif isinstance(spec.model, OnnxModel) and spec.model.stored is not None:
        input_shape = tuple(spec.model.stored.input_shape)
    else:
        input_shape = tuple(x.shape[1:]) if isinstance(spec.data, DatasetData) else (x.shape[1],)
    x_dtype = torch.int64 if integer else dtype
    x_train = torch.as_tensor(x.reshape(len(x), *input_shape), dtype=x_dtype, device=device)
    labels = y.dtype.kind in "iu"
    if labels:
        check_labels(y, spec.model.output_dim)
    y_train = torch.as_tensor(y, dtype=torch.int64 if labels else dtype, device=device)
    return Dataset(x_train, y_train, x_train[: spec.probe_n()], input_shape)


def check_labels(labels: np.ndarray, classes: int | None) -> None:
    """Class labels [n] must index the model's `classes` outputs (the service refuses others at submission;
    an index past the logits would otherwise fail inside the loss, on a GPU as a device-side assert)."""
    if classes is None or labels.min() < 0 or labels.max() >= classes:
        raise ValueError(
            f"class labels y lie in [{labels.min()}, {labels.max()}]; the model's {classes} outputs "
            f"take labels in [0, {classes})"
        )


def standardize(x: np.ndarray) -> np.ndarray:
    """(x − mean) / std per column of x [n, d]; columns with zero spread are only centred."""
    spread = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(spread > 0, spread, 1.0)


def _is_convolutional(spec: JobSpec) -> bool:
    model = spec.model
    return isinstance(model, CnnModel) or (isinstance(model, ResnetModel) and model.block == "conv")


def _arrays(data, uploads: Uploads) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(data, GaussianMixtureData):
        return gaussian_mixture(data)
    if isinstance(data, Sine1DData):
        return sine1d(data)
    if isinstance(data, BuiltinData):
        return builtin(data)
    if isinstance(data, InlineData):
        return inline(data)
    if isinstance(data, DatasetData):
        return uploaded(data, uploads)
    raise TypeError(f"unknown data kind {type(data).__name__}")


def gaussian_mixture(data: GaussianMixtureData) -> tuple[np.ndarray, np.ndarray]:
    """k balanced classes (counts differ by at most one, order shuffled), x | y=c ~ N(μ_c, σ² I_d).

    The class means are μ_c ~ N(0, mean_scale² I_d), so ‖x‖²/d ≈ mean_scale² + σ².
    """
    rng = np.random.default_rng(data.seed)
    means = rng.normal(0.0, data.mean_scale, size=(data.classes, data.input_dim))
    labels = rng.permutation(np.arange(data.n_train) % data.classes)
    x = means[labels] + data.sigma * rng.normal(size=(data.n_train, data.input_dim))
    return x, encode_targets(labels, data.classes, data.targets)


def sine1d(data: Sine1DData) -> tuple[np.ndarray, np.ndarray]:
    """x ~ U[−π, π], y = sin(frequency · x) + noise · ε with ε ~ N(0, 1); shapes [n, 1]."""
    rng = np.random.default_rng(data.seed)
    x = rng.uniform(-np.pi, np.pi, size=(data.n_train, 1))
    y = np.sin(data.frequency * x) + data.noise * rng.normal(size=x.shape)
    return x, y


def builtin(data: BuiltinData) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random subset of n_train points of a scikit-learn data set (no download).

    digits: 8×8 images with pixel values 0…16 scaled to [0, 1]; iris, breast_cancer: raw
    features; two_moons: make_moons(n_train, noise=0.1).
    """
    if data.name == "two_moons":
        x, labels = sk.make_moons(n_samples=data.n_train, noise=0.1, random_state=data.seed)
        return x, encode_targets(labels, 2, data.targets)
    loader = {"digits": sk.load_digits, "iris": sk.load_iris, "breast_cancer": sk.load_breast_cancer}
    bunch = loader[data.name]()
    x, labels = bunch.data.astype(np.float64), bunch.target
    if data.name == "digits":
        x = x / 16.0
    if data.n_train > len(x):
        raise ValueError(f"data.n_train = {data.n_train} exceeds the {len(x)} points of builtin data set {data.name!r}")
    chosen = np.random.default_rng(data.seed).permutation(len(x))[: data.n_train]
    return x[chosen], encode_targets(labels[chosen], int(labels.max()) + 1, data.targets)


def inline(data: InlineData) -> tuple[np.ndarray, np.ndarray]:
    """The request's arrays; scalar targets become a column [n, 1]."""
    x = np.asarray(data.x, dtype=np.float64)
    y = np.asarray(data.y, dtype=np.float64)
    return x, y.reshape(len(y), -1)


def uploaded(data: DatasetData, uploads: Uploads) -> tuple[np.ndarray, np.ndarray]:
    """The first n_train points of an uploaded data set: x [n, ...] (float64, or int64 for integers), y [n, O]
    float64, or class labels [n] int64 for integers in one column ([n] or [n, 1])."""
    x, y = uploads.dataset(data.id)
    n = data.n_points()
    if n > len(x):
        raise ValueError(f"data.n_train = {n} exceeds the {len(x)} points of data set {data.id}")
    x = x[:n].astype(np.int64 if x.dtype.kind in "iu" else np.float64)
    y = y[:n].reshape(n, -1)
    if y.dtype.kind in "iu" and y.shape[1] == 1:
        return x, y[:, 0].astype(np.int64)
    return x, y.astype(np.float64)


def encode_targets(labels: np.ndarray, classes: int, targets: Targets) -> np.ndarray:
    """Integer labels [n] → targets [n, O] as described in the module docstring."""
    labels = np.asarray(labels)
    if targets == "onehot":
        return np.eye(classes)[labels]
    if targets == "label":
        return labels.astype(np.float64)[:, None]
    return (2.0 * labels / (classes - 1) - 1.0)[:, None]

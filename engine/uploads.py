"""Uploaded data sets and ONNX models, handed to the engine for one run.

The worker reads an upload's bytes from the database (store/job_store.py) and provides them
for the run; the engine never reaches storage itself:

    with provided(Uploads(datasets={id: (x, y)}, models={id: onnx_bytes})):
        run(spec, callbacks)

ntklab.engine.training.data reads a data set's arrays and ntklab.engine.nets.onnx_model a model's bytes
by the id the spec names. Arrays are decoded with allow_pickle=False, always.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Uploads:
    datasets: Mapping[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    models: Mapping[str, bytes] = field(default_factory=dict)


_PROVIDED: ContextVar[Uploads] = ContextVar("ntklab_uploads", default=Uploads())


def load_npy(data: bytes) -> np.ndarray:
    """A .npy file's array; object arrays (pickles) are refused by numpy with allow_pickle=False."""
    return np.load(io.BytesIO(data), allow_pickle=False)


@contextlib.contextmanager
def provided(uploads: Uploads) -> Iterator[None]:
    token = _PROVIDED.set(uploads)
    try:
        yield
    finally:
        _PROVIDED.reset(token)


def dataset(dataset_id: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of an uploaded data set provided for this run."""
    try:
        return _PROVIDED.get().datasets[dataset_id]
    except KeyError:
        raise LookupError(f"data set {dataset_id} was not provided to the engine") from None


def model(model_id: str) -> bytes:
    """The ONNX bytes of an uploaded model provided for this run."""
    try:
        return _PROVIDED.get().models[model_id]
    except KeyError:
        raise LookupError(f"model {model_id} was not provided to the engine") from None

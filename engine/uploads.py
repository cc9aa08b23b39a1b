"""Uploaded data sets and ONNX models, handed to the engine for one run.

The worker reads an upload's bytes from the database (store/job_store.py) and passes them to
the run; the engine never reaches storage itself:

    run(spec, callbacks, uploads=Uploads(datasets={id: (x, y)}, models={id: onnx_bytes}))

ntklab.engine.training.data reads a data set's arrays and ntklab.engine.nets.network a model's
bytes from it by the id the spec names. Arrays are decoded with allow_pickle=False, always.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Uploads:
    """The uploads one run may read: data set id → (x, y), model id → ONNX bytes."""

    datasets: Mapping[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    models: Mapping[str, bytes] = field(default_factory=dict)

    def dataset(self, dataset_id: str) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of an uploaded data set."""
        try:
            return self.datasets[dataset_id]
        except KeyError:
            raise LookupError(f"data set {dataset_id} was not provided to the engine") from None

    def model(self, model_id: str) -> bytes:
        """The ONNX bytes of an uploaded model."""
        try:
            return self.models[model_id]
        except KeyError:
            raise LookupError(f"model {model_id} was not provided to the engine") from None


NO_UPLOADS = Uploads()


def load_npy(data: bytes) -> np.ndarray:
    """A .npy file's array; object arrays (pickles) are refused by numpy with allow_pickle=False."""
    return np.load(io.BytesIO(data), allow_pickle=False)

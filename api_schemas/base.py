"""What every spec module shares: the strict base model, the hidden activations' names, width and depth limits.

spec.py (the job) and graph.py (the layers of a graph model) both build on these; they live
here so that neither of the two has to import the other's module to define its models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

MAX_WIDTH = 10_000_000
MAX_LAYERS = 64

Activation = Literal["relu", "tanh", "gelu", "softplus", "swish", "sigmoid", "erf", "quadratic", "identity"]


class Strict(BaseModel):
    """Unknown fields, NaN and ±Infinity are refused; defaults are validated like given values."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_default=True)

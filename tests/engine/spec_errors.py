"""A refused spec's errors as one line, each "dotted.location: message", for tests that look for a field's name.

The location is pydantic's, less the model union's member tag (`model.mlp.hidden.1` → `model.hidden.1`),
so that a field is named as the spec writes it; other unions' tags (a graph layer's `dense`) stay.
"""

import pytest
from pydantic import ValidationError

from ntklab.api_schemas.spec import MODEL_KINDS, JobSpec


def error_text(spec: dict) -> str:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(spec)
    return "; ".join(f"{'.'.join(map(str, without_model_tag(e['loc'])))}: {e['msg']}" for e in caught.value.errors())


def without_model_tag(loc: tuple) -> tuple:
    """("model", "graph", "layers", …) → ("model", "layers", …); any other location as it is."""
    return loc[:1] + loc[2:] if loc[:1] == ("model",) and len(loc) > 1 and loc[1] in MODEL_KINDS else loc

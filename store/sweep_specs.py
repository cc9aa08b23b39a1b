"""A sweep job's spec is its sweep's base spec plus a patch: the base is stored once, on the sweep.

    sweeps.spec["base"]   the canonical base job spec (every default written out), once per sweep
    jobs.spec_patch       {dotted path: value} where this job's spec differs from that base;
                          NULL for a job submitted on its own (and for sweep jobs stored before
                          revision 0005, which kept their full spec)
    jobs.spec             the full spec of a job submitted on its own; JSON null for a sweep job

A path is a grid-style dotted path through objects only ("model.hidden", "training.lr"):
a list that differs is stored whole, so inline data the grid does not change (data.x,
data.y: up to max_inline_values numbers) is never copied into a job row. Keys of a job
spec are field names, which never hold a dot, so a path names exactly one place.

`job_spec` is the one way every reader (the worker's claim, GET /v1/jobs/{id}, the sweep
table and fits, the upload-in-use check) sees a job's full spec. It copies only the objects
on a patched path and shares the rest with the base, so materialising all 500 jobs of a
sweep over a 1,000,000-value base costs 500 patches, not 500 copies of the data.
"""

from __future__ import annotations

from typing import Any

from ntklab.store.models import Job


def patch_between(base: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """The {dotted path: value} with `apply_patch(base, patch) == document`.

    Both are full job spec documents (the same top-level keys). Objects with the same keys
    are compared key by key; anything else that differs (a list, a scalar, an object whose
    keys changed, e.g. another data.kind) is stored whole. Identical objects (`is`) are
    skipped without being compared, which is how a shared 1,000,000-value data.x costs nothing.
    """
    patch: dict[str, Any] = {}
    for key, value in document.items():
        _diff(base[key], value, key, patch)
    return patch


def _diff(old: Any, new: Any, path: str, patch: dict[str, Any]) -> None:
    if old is new:
        return
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        for key, value in new.items():
            _diff(old[key], value, f"{path}.{key}", patch)
    elif type(old) is not type(new) or old != new:
        patch[path] = new


def apply_patch(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`base` with each patched path set; the objects on those paths are copied, everything else is shared."""
    spec = dict(base)
    for path, value in patch.items():
        *parents, last = path.split(".")
        node = spec
        for key in parents:
            child = dict(node[key])
            node[key] = child
            node = child
        node[last] = value
    return spec


def job_spec(job: Job) -> dict[str, Any]:
    """The full spec of `job`: its own, or its sweep's base with its patch applied (the sweep row is
    loaded through the job's session, once per session)."""
    if job.spec_patch is None:
        return job.spec
    return apply_patch(job.sweep.spec["base"], job.spec_patch)

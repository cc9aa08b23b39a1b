"""A figure's title in words: the paper's figure a preset reproduces, not the sweep's slug.

    figure_title("fig1-width (cpu)", ["preset", "fig1-width"])
        → "Figure 1 (left): ΔK vs width, linear vs softmax vs swish head (cpu scale)"
    figure_title("my widths", [])  → "my widths"

`PRESET_TITLES` is the one list of the presets' titles: service/presets.py takes each preset's
title from here (GET /v1/presets returns it), and the figures of a preset's sweep — the service's
plot, the SDK's `sweep.plot()`, `make demo` — are titled with it. A preset's sweep is named
"<preset> (<scale>)" and tagged "preset" and "<preset>" (service/presets.py); any other sweep keeps
its own name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

PRESET_TITLES: dict[str, str] = {
    "fig1-width": "Figure 1 (left): ΔK vs width, linear vs softmax vs swish head",
    "fig1-time": "Figure 1 (right): ΔK(t) during training at one large width",
    "fig2-bottleneck": "Figure 2: ΔK vs bottleneck width in a wide 3-hidden-layer net",
    "table1-hessian": "Table 1: model-Hessian norm at init vs width",
    "param-check": "Appendix A: ntk vs standard vs meanfield parameterization",
    "lazy-is-not-small": "Section 1: ‖w*−w₀‖₂ = O(1) while ‖w*−w₀‖_∞ = O(1/√m)",
    "finite-to-infinite": "Beyond the paper: the tangent kernel's distance from its infinite-width limit Θ∞",
}

PRESET_NAME = re.compile(r"^(?P<preset>[\w-]+) \((?P<scale>\w+)\)$")
"""A preset's sweep name: "fig1-width (cpu)"."""


def figure_title(name: str | None, tags: Sequence[str]) -> str:
    """The preset's title with its scale for a preset's sweep, else the sweep's name ("" without one)."""
    named = PRESET_NAME.match(name or "")
    if "preset" not in tags or named is None or named["preset"] not in tags or named["preset"] not in PRESET_TITLES:
        return name or ""
    return f"{PRESET_TITLES[named['preset']]} ({named['scale']} scale)"

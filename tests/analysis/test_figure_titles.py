"""A preset's figure is titled with the paper's figure in words; any other sweep's with its own name."""

from __future__ import annotations

import pytest

from ntklab.analysis.figure_titles import figure_title
from ntklab.service.presets import PRESETS


@pytest.mark.parametrize("scale", ["smoke", "cpu", "paper"])
def test_every_presets_sweep_is_titled_with_the_presets_title_and_scale(scale):
    for preset in PRESETS.values():
        sweep = preset.sweep(scale)
        assert figure_title(sweep.name, sweep.tags) == f"{preset.title} ({scale} scale)"
    assert PRESETS["fig2-bottleneck"].title == "Figure 2: ΔK vs bottleneck width in a wide 3-hidden-layer net"


def test_a_sweep_of_the_users_keeps_its_name_even_when_it_looks_like_a_presets():
    assert figure_title("fig1-width (cpu)", []) == "fig1-width (cpu)"
    assert figure_title("fig1-width (cpu)", ["preset"]) == "fig1-width (cpu)"
    assert figure_title("my widths", ["preset", "fig1-width"]) == "my widths"
    assert figure_title(None, []) == ""

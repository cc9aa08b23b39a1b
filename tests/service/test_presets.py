import pytest

from config.settings import Settings
from service.caps import check_spec_caps
from service.grid import expand_grid, grid_size
from service.presets import PRESETS, SCALES


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("scale", SCALES)
def test_every_preset_expands_to_valid_jobs(name, scale):
    sweep = PRESETS[name].sweep(scale)
    points = expand_grid(sweep.base, sweep.grid)
    assert len(points) == grid_size(sweep.grid) > 0
    assert sweep.tags[-1] == name
    defaults = Settings()
    assert all(check_spec_caps(point.spec, defaults) > 0 for point in points), "every job within the default caps"


def test_scales_grow():
    for preset in PRESETS.values():
        sizes = [grid_size(preset.sweep(scale).grid) for scale in SCALES]
        assert sizes == sorted(sizes)


def test_table1_families_are_linked_and_grouped_by_name():
    points = expand_grid(PRESETS["table1-hessian"].sweep("smoke").base, PRESETS["table1-hessian"].sweep("smoke").grid)
    bottleneck = [p.spec for p in points if p.spec.name == "bottleneck"]
    assert bottleneck and all(s.model.hidden[0] == s.model.hidden[2] and s.model.hidden[1] == 3 for s in bottleneck)
    assert {p.spec.model.output_activation for p in points if p.spec.name == "swish head"} == {"swish"}

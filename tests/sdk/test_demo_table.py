"""`make demo`'s console table of a fit: every value whole, small ones in scientific form, never an ellipsis."""

from __future__ import annotations

import io

from rich.console import Console

from ntklab.demo import fit_table, value_text
from ntklab.terminal import PIPE_WIDTH

WIDTHS = (30, 100, 300, 1000, 3000, 10_000)
LINEAR = (0.159, 0.0657, 0.0285, 0.00777, 0.00312, 0.000502)  # docs/reproduction.md, Figure 1 (left)


def _fit(head: str, means: tuple[float, ...], slope: float) -> dict:
    return {
        "y": "delta_k_max",
        "x": "model.hidden.0",
        "group": {"model.output_activation": head},
        "slope": slope,
        "slope_low": slope - 0.17,
        "slope_high": slope + 0.17,
        "r_squared": 0.984,
        "points": [{"x": float(x), "y_mean": mean, "y_std": 0.0, "runs": 2} for x, mean in zip(WIDTHS, means)],
    }


FITS = [
    _fit("identity", LINEAR, -0.97),
    _fit("softmax", (0.991, 0.992, 0.993, 0.994, 1.13, 0.994), 0.01),
    _fit("swish", (1.68, 1.13, 3.02, 2.75, 1.57, 1.92), 0.04),
]


def _printed(width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(fit_table("delta_k_max", FITS))
    return out.getvalue()


def test_small_values_keep_three_significant_digits_in_scientific_form():
    assert [value_text(value) for value in LINEAR] == ["0.159", "0.0657", "0.0285", "7.77e-03", "3.12e-03", "5.02e-04"]
    assert (value_text(0.0), value_text(1.13), value_text(123456.0), value_text(-0.00042)) == (
        "0",
        "1.13",
        "1.23e+05",
        "-4.20e-04",
    )


def test_the_linear_heads_row_prints_every_value_whole_on_a_pipe():
    """The demo's console on a pipe is PIPE_WIDTH wide (ntklab.terminal.stdout_console)."""
    (row,) = [line for line in _printed(PIPE_WIDTH).splitlines() if "linear head" in line]
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells == [
        "linear head",
        "0.159",
        "0.0657",
        "0.0285",
        "7.77e-03",
        "3.12e-03",
        "5.02e-04",
        "-0.97 ± 0.17",
        "0.984",
    ]


def test_a_narrow_terminal_folds_cells_and_cuts_none():
    printed = _printed(80)
    assert "…" not in printed
    assert all(len(line) <= 80 for line in printed.splitlines())

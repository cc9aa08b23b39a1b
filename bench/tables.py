"""The Markdown tables the benchmarks print on stdout, a row as soon as it is measured.

    ## <title>

    | column | column | … |
    |---|---|…|
    | cell | cell | … |

docs/benchmarks.md quotes them as printed.
"""

from __future__ import annotations

from collections.abc import Sequence


def print_head(title: str, columns: Sequence[str]) -> None:
    """A `## title` heading between blank lines, then the table's header row and its rule."""
    print(f"\n## {title}\n")
    print_row(*columns)
    print("|" + "---|" * len(columns))


def print_row(*cells: object) -> None:
    """One row of cells (each printed with str), flushed so that a long run shows it at once."""
    print("| " + " | ".join(map(str, cells)) + " |", flush=True)

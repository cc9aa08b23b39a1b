"""Per-folder test time from pytest JUnit XML files, as the Markdown table docs/testing.md shows.

    .venv/bin/pytest … --junitxml=run.xml && python scripts/test_times.py run.xml [more.xml …]

`make test` and `make test-fast` write two files (the pytest-xdist run and the serial one); their
test cases are summed together. Under pytest-xdist a test's time is still its own (each worker
process times the tests it runs), so the seconds add up to more than the wall time of the run.

A test's time is its setup + call + teardown (pytest's default junit_duration_report = total), so a
module- or session-scoped fixture is counted in the first test that uses it. Folders are the first
level under tests/ (tests/service, tests/engine, …); files directly in tests/ are "tests/ (top)".
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def folder_of(classname: str) -> str:
    """'tests.service.test_auth' (or '….TestX') → 'tests/service'; 'tests.test_layering' → 'tests/ (top)'."""
    parts = classname.split(".")
    if len(parts) < 3 or parts[1].startswith("test_"):
        return "tests/ (top)"
    return f"tests/{parts[1]}"


def folder_times(*junit_xmls: str) -> dict[str, tuple[int, float]]:
    """{folder: (number of tests, seconds)} over every testcase of the files, skipped ones included."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for junit_xml in junit_xmls:
        for case in ET.parse(junit_xml).getroot().iter("testcase"):
            total = totals[folder_of(case.get("classname", ""))]
            total[0] += 1
            total[1] += float(case.get("time", 0.0))
    return {folder: (int(count), seconds) for folder, (count, seconds) in totals.items()}


def markdown_table(times: dict[str, tuple[int, float]]) -> str:
    whole = sum(seconds for _, seconds in times.values()) or 1.0
    rows = ["| folder | tests | seconds | share |", "|---|---:|---:|---:|"]
    for folder, (count, seconds) in sorted(times.items(), key=lambda item: -item[1][1]):
        rows.append(f"| {folder} | {count} | {seconds:.1f} | {100 * seconds / whole:.0f} % |")
    count = sum(count for count, _ in times.values())
    rows.append(f"| **all** | {count} | {whole:.1f} | 100 % |")
    return "\n".join(rows)


def main() -> None:
    print(markdown_table(folder_times(*sys.argv[1:])))


if __name__ == "__main__":
    main()

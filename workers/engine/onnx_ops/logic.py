"""Comparisons, boolean logic and selection: Equal, Less, …, Not, And, Or, Where."""

from __future__ import annotations

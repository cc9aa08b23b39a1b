"""The path diagnostics read off a run: weight change, linearization error, layer sensitivity, run warnings."""

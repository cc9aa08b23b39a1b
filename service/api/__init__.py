"""The HTTP layer: dependencies (deps.py) and one router per resource (routes/<noun>.py)."""

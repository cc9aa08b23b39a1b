"""Power-law fits, sweep tables and their figures: numpy, scipy and matplotlib, never torch or SQL.

One implementation used by the service (a sweep's fits and its plot) and by the SDK (drawing
the fits the service returned), so the two can never disagree.
"""

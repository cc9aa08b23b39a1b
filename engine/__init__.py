"""The pure-torch core of ntklab: networks, data, training, tangent kernels, Hessians.

No Celery, SQL or HTTP here: `run(spec, callbacks)` (engine/run.py) is callable from a
notebook, the worker and the CLI alike. Its parts, one idea per subpackage: nets/ (networks),
kernels/ (the empirical NTK), curvature/ (Hessians and their spectra), limits/ (the
infinite-width kernels), training/ (data, loop, schedules), diagnostics/ (what is read off a run).
"""

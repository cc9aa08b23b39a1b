"""The pure-torch core of ntklab: networks, data, training, tangent kernels, Hessians.

No Celery, SQL or HTTP here: `run(spec, callbacks)` is callable from a notebook, the
worker and the CLI alike.
"""

"""The job's plan and cost from its spec alone, torch-free: the layer plan of a network, its
parameter count, one example's forward profile, the kernel methods' cost model, the infinite-width
kernels' cost and the job's memory, work and time estimate.

The API (caps, the estimate endpoint), the store (the stored estimate), the worker (the memory
check before a job) and the engine (the kernel cost model that `auto` uses) all read the same
arithmetic. It imports pydantic, the standard library and the wire contract's spec types
(ntklab.api_schemas.spec, .graph, .graph_plan) only; api_schemas never imports it.
"""

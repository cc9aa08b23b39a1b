"""Curvature: the model Hessian (batched Hessian-vector products, Lanczos), the loss Hessian's operators and split, spectral estimators."""

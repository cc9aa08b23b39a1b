"""The empirical neural tangent kernel: structured per-layer rules, the per-sample fallback, the symmetric Gram, the cost model that picks a method."""

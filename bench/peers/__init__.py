"""Helpers of bench/bench_peers.py: the interleaved timing harness and the rows measured against each peer."""

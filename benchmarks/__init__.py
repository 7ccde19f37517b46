"""PATHS benchmarks: C kernels (built into paths._native.bench) and the Python drivers that run them."""

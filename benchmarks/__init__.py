"""Benchmarks: run with `python -m benchmarks.run --size small|medium|large`; results go to benchmarks/results/."""

"""Benchmarks run by `make bench` (never by `make test`): each `bench_*.py` prints a table of ratios."""

"""Benchmarks run by `make bench` (never by `make test`): each `bench_*.py` prints a table of ratios."""

RUNNER_DEFAULTS_ENV = "KVWISE_BENCH_RUNNER_DEFAULTS"
"""Names, comma-separated, of the variables the runner (`__main__`) set where the user had not: a
server a benchmark starts drops them (`bench_vllm.users_environment`)."""

"""Benchmarks that print figures: `python -m bench.NAME --help`."""

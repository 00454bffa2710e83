"""Benchmarks: standalone scripts (``python -m tests.benchmarks.<name>``), not part of pytest."""

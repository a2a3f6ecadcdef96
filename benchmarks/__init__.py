"""Benchmarks: every figure is a ratio to a floor measured in the same run (docs/ARCHITECTURE.md section 4)."""

"""Benchmarks: every figure is a ratio to a floor measured in the same run (DESIGN.md section 4)."""

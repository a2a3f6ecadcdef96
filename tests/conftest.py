"""Shared fixtures: tests are trio tests (pytest-trio, trio_mode) by default."""

"""Tools of tests/test_fidelity_results.py that run in worker processes (imported there by reference)."""

from __future__ import annotations

from fractions import Fraction

from runtime import tool
from runtime.placement import Subprocess


class Reading:
    """A result type msgspec cannot encode."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __str__(self) -> str:
        return f"reading {self.value}"


@tool(placement=Subprocess(workers=1))
def measure() -> dict[str, object]:
    """A result with objects msgspec cannot encode, made in another process."""
    return {"reading": Reading(2.5), "ratio": Fraction(1, 3), "more": ...}


@tool(placement=Subprocess(workers=1), strict_result=True)
def miscounted() -> list[int]:
    """A result that is not its declared type, made in another process (which fails the call)."""
    return ["one"]  # type: ignore[list-item]

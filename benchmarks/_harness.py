"""Timing helpers: interleaved repetitions, medians, ratios, a table, a JSON file."""

from __future__ import annotations

import gc
import json
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trio

RESULTS = Path(__file__).parent / "results"


@dataclass
class Row:
    workload: str
    subject: str
    floor: str
    subject_us: float
    floor_us: float
    target: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.subject_us / self.floor_us

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        return "ok" if self.ratio <= self.target else "OVER"


@dataclass
class Report:
    name: str
    rows: list[Row] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # figures that are not ratio rows, saved as they are

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def print(self) -> None:
        print(f"\n== {self.name} ==")
        print(f"{'workload':<34} {'subject us':>11} {'floor':<8} {'floor us':>9} {'ratio':>7} {'target':>7}")
        for r in self.rows:
            target = f"<= {r.target:g}" if r.target is not None else ""
            print(
                f"{r.workload:<34} {r.subject_us:>11.2f} {r.floor:<8} {r.floor_us:>9.2f} "
                f"{r.ratio:>6.2f}x {target:>7} {r.verdict} {r.note}"
            )

    def save(self) -> Path:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{self.name}.json"
        data = {
            "name": self.name,
            "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "rows": [{**asdict(r), "ratio": round(r.ratio, 3)} for r in self.rows],
            **self.extra,
        }
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path


def per_op_sync(fn: Callable[[], object], n: int) -> float:
    """Microseconds per call of `fn`, over `n` calls."""
    gc.collect()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def compare(
    subject: Callable[[], float], floor: Callable[[], float], repeats: int = 7
) -> tuple[float, float]:
    """Median per-op times of two measurements, run interleaved so drift hits both alike."""
    subject_times: list[float] = []
    floor_times: list[float] = []
    for _ in range(repeats):
        floor_times.append(floor())
        subject_times.append(subject())
    return statistics.median(subject_times), statistics.median(floor_times)


def run_trio(fn: Callable[[], Awaitable[float]]) -> float:
    return trio.run(fn)

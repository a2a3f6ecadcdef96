"""The examples run as users would run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_console_trace_example_draws_a_parallel_turn_as_siblings() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "trace_console.py"), "--tree"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    tree = done.stdout.splitlines()
    names = [line.strip().split("  ")[0] for line in tree]
    depths = [(len(line) - len(line.lstrip())) // 2 for line in tree]
    assert list(zip(names, depths, strict=True)) == [
        ("agent turn", 0),
        ("execute_tool get_weather", 1),
        ("weather api", 2),
        ("execute_tool search_docs", 1),
        ("execute_tool get_wether", 1),
    ]
    assert tree[-1].endswith("ERROR")
    assert "did you mean 'get_weather'" in done.stderr

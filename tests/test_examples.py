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
    assert "ERROR" in tree[-1]
    assert "did you mean 'get_weather'" in done.stderr


def test_the_demo_shows_every_outcome_of_a_parallel_turn_and_its_spans() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runtime", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
    out = done.stdout
    for outcome in ("ok", "rejected", "unknown_tool", "invalid_arguments", "error", "timeout"):
        assert f"  {outcome}  " in out, outcome
    assert "7 tool messages go back to the model, in call order." in out
    assert "agent turn" in out
    assert out.count("  execute_tool ") == 7
    assert "Traceback" not in out + done.stderr

"""A test's own server process that prints the URL it serves on its first line (the scripts in
tests/mcp_servers/), started with this checkout's runtime and killed when the test is done."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def served(script: Path) -> Iterator[str]:
    """Run `script` and yield the URL it prints (the server is killed on exit)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's runtime, in the child too
    process = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("http://"), f"the server did not start: {line!r}"
        yield line.strip()
    finally:
        process.kill()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()

"""docs/integrations.md: every Python block runs as the program it shows, and prints what the page says.

The page follows the docs' block convention (a ```python block is a complete program; a ```text
block marked `<!-- docs: output -->` right after it is its exact stdout).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"
_BLOCK = re.compile(
    r"```python\n(?P<code>.*?)```\n(?:\n<!-- docs: output -->\n```text\n(?P<out>.*?)```\n)?", re.S
)


def programs() -> list[tuple[int, str, str | None]]:
    text = PAGE.read_text()
    return [(text[: m.start()].count("\n") + 1, m["code"], m["out"]) for m in _BLOCK.finditer(text)]


PROGRAMS = programs()


@pytest.mark.parametrize(("line", "code", "output"), PROGRAMS, ids=[f"line {p[0]}" for p in PROGRAMS])
def test_the_program_runs_and_prints_what_the_page_shows(
    line: int, code: str, output: str | None, tmp_path: Path
) -> None:
    pytest.importorskip("agents")
    pytest.importorskip("pydantic_ai")
    pytest.importorskip("langgraph")
    script = tmp_path / "program.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"docs/integrations.md:{line} failed:\n{done.stderr}"
    if output is not None:
        assert done.stdout == output, f"docs/integrations.md:{line} printed\n{done.stdout}"


def test_every_program_of_the_page_is_found() -> None:
    assert len(PROGRAMS) == PAGE.read_text().count("```python")

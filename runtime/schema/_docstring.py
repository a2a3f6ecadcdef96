"""Docstrings -> a summary and parameter descriptions (Google, NumPy and Sphinx styles)."""

from __future__ import annotations

import inspect
import re

__all__ = ["Docstring", "parse_docstring"]

_GOOGLE_HEADER = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Attributes|Fields)\s*:\s*$"
)
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*:\s*(?P<desc>.*)$")
_NUMPY_HEADER = re.compile(r"^(Parameters|Other Parameters|Attributes)\s*$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(:.*)?$")
_SPHINX_PARAM = re.compile(
    r"^:(param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?(?P<name>\*{0,2}[A-Za-z_]\w*)\s*:\s*(?P<desc>.*)$"
)
_SECTION_BREAK = re.compile(r"^(\w[\w ]*:\s*$|:\w+)")


class Docstring:
    """What a docstring tells the model: a summary and per-parameter text."""

    __slots__ = ("params", "summary")

    def __init__(self, summary: str, params: dict[str, str]) -> None:
        self.summary = summary
        self.params = params


def parse_docstring(doc: str | None) -> Docstring:
    """Split a docstring into its first paragraph and its parameter descriptions."""
    if not doc:
        return Docstring("", {})
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or _GOOGLE_HEADER.match(stripped) or stripped.startswith(":"):
            break
        summary.append(stripped)
    params: dict[str, str] = {}
    if len(summary) < len(lines):  # anything past the summary: look for parameter sections
        _google(lines, params)
        if "--" in doc:
            _numpy(lines, params)
        if ":" in doc:
            _sphinx(lines, params)
    return Docstring(" ".join(summary), params)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        header = lines[i]
        if not _GOOGLE_HEADER.match(header.strip()):
            i += 1
            continue
        base = _indent(header)
        i += 1
        entry_indent: int | None = None
        current: str | None = None
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                i += 1
                continue
            indent = _indent(line)
            if indent <= base:
                break
            if entry_indent is None:
                entry_indent = indent
            match = _GOOGLE_ENTRY.match(line.strip()) if indent == entry_indent else None
            if match:
                current = match["name"]
                params.setdefault(current, match["desc"].strip())
            elif current is not None and indent > entry_indent:
                params[current] = f"{params[current]} {line.strip()}".strip()
            i += 1


def _numpy(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i + 1 < len(lines):
        if not (_NUMPY_HEADER.match(lines[i].strip()) and set(lines[i + 1].strip()) == {"-"}):
            i += 1
            continue
        base = _indent(lines[i])
        i += 2
        current: str | None = None
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if i + 1 < len(lines) and stripped and set(lines[i + 1].strip()) == {"-"}:
                break  # the next section's header
            if not stripped:
                i += 1
                continue
            indent = _indent(line)
            if indent == base:
                match = _NUMPY_ENTRY.match(stripped)
                if not match:
                    break
                current = match["name"]
                params.setdefault(current, "")
            elif current is not None and indent > base:
                params[current] = f"{params[current]} {stripped}".strip()
            i += 1


def _sphinx(lines: list[str], params: dict[str, str]) -> None:
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        match = _SPHINX_PARAM.match(stripped)
        if match:
            current = match["name"].lstrip("*")
            params.setdefault(current, match["desc"].strip())
        elif current is not None and stripped and not _SECTION_BREAK.match(stripped) and _indent(line) > 0:
            params[current] = f"{params[current]} {stripped}".strip()
        else:
            current = None

"""What an extra of tool-runtime installs, said as a command that works today.

tool-runtime is not on a package index yet, so installing it by name with an extra cannot work
for a user: an error that needs an extra names the packages the extra holds (read from the installed
distribution's metadata, else from the checkout's pyproject.toml), which pip installs anywhere,
and the extra itself as a checkout installs it.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import tomllib
from pathlib import Path

__all__ = ["install_command"]

_DISTRIBUTION = "tool-runtime"
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def install_command(extra: str) -> str:
    """`pip install ...` of the packages the `extra` holds, and the extra from a checkout:
    "pip install 'ray[client]>=2.40' (the `ray` extra; in a checkout: pip install '.[ray]')"."""
    packages = _requirements(extra)
    checkout = f"pip install '.[{extra}]'"
    if not packages:
        return f"{checkout} (in a checkout of tool-runtime)"
    quoted = " ".join(shlex.quote(p) for p in packages)
    return f"pip install {quoted} (the `{extra}` extra; in a checkout: {checkout})"


def _requirements(extra: str, seen: frozenset[str] = frozenset()) -> list[str]:
    """The requirements of `extra`, its own extras (`tool-runtime[a,b]`) expanded."""
    found: list[str] = []
    for requirement in _extra_requirements().get(extra, []):
        own = re.fullmatch(r"tool[-_]runtime\[([^\]]+)\]", requirement.replace(" ", ""))
        if own is None:
            found.append(requirement)
            continue
        for name in own.group(1).split(","):
            if name not in seen:
                found.extend(_requirements(name, seen | {extra}))
    return found


def _extra_requirements() -> dict[str, list[str]]:
    try:
        lines = importlib.metadata.requires(_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        lines = []
    extras: dict[str, list[str]] = {}
    for line in lines:
        requirement, _, marker = line.partition(";")
        match = _EXTRA.search(marker)
        if match:
            extras.setdefault(match.group(1), []).append(requirement.strip())
    if extras:
        return extras
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"  # a checkout, not installed
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        optional = project.get("optional-dependencies", {})
        return {name: [str(r) for r in reqs] for name, reqs in optional.items()}
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return {}

"""The installed distribution's version, or the checkout's own when it is not installed."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

__all__ = ["__version__"]

_DISTRIBUTION = "tool-runtime"


def _version() -> str:
    try:
        return importlib.metadata.version(_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pass
    # A source checkout used without installing it (`PYTHONPATH=.`): pyproject.toml is beside
    # the package, and its version is the one a build of this tree would have.
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        if project.get("name") == _DISTRIBUTION and isinstance(project.get("version"), str):
            return str(project["version"])
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        pass
    return "0+unknown"


__version__ = _version()

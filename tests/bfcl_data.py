"""The Berkeley Function Calling Leaderboard's data and executable API classes, from its wheel.

`bfcl-eval` (PyPI) ships the multi-turn test cases, their ground truth and the Python classes
the calls run against (a file system, a trading bot, a travel agency...). `ensure()` downloads
the pinned wheel once with pip (`pip download --no-deps`, no dependencies installed) into
`.cache/bfcl/` (git-ignored) and unpacks it there; only its `bfcl_eval` package is imported, and
only the modules the executable classes need (mpmath, for MathAPI, is in the dev extra).

    python tests/bfcl_data.py        # fetch it (`make bfcl`); tests fetch it themselves too
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

__all__ = ["VERSION", "ensure"]

VERSION = "2026.3.23"
ROOT = Path(__file__).resolve().parent.parent / ".cache" / "bfcl"


def ensure() -> Path:
    """The folder holding the unpacked `bfcl_eval` package (put it on `sys.path`)."""
    unpacked = ROOT / f"bfcl_eval-{VERSION}"
    if (unpacked / "bfcl_eval" / "data").is_dir():
        return unpacked
    ROOT.mkdir(parents=True, exist_ok=True)
    wheel = ROOT / f"bfcl_eval-{VERSION}-py3-none-any.whl"
    if not wheel.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"bfcl-eval=={VERSION}",
                "--no-deps",
                "--quiet",
                "-d",
                str(ROOT),
            ],
            check=True,
        )
    partial = ROOT / f"bfcl_eval-{VERSION}.partial"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(partial)
    partial.rename(unpacked)
    return unpacked


if __name__ == "__main__":
    print(ensure())

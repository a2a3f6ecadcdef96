"""FastMCP 4 with its tasks (fastmcp-tasks, SEP-2663) in a virtualenv of its own, `.venv-fastmcp/`
(git-ignored), for tests/test_fastmcp_interop.py: FastMCP's server and client run there as
processes, talking to ours over MCP; nothing of FastMCP is imported by the runtime or its venv.

Its own venv because fastmcp-tasks' newest release (4.1.4) pins fastmcp-slim==4.1.4 while the
newest fastmcp is 4.2.x; both sides use mcp 2.3.0 (the same SDK as ours, pinned here too, so a
new SDK release cannot change what is tested). `ensure()` makes it once (pip, from PyPI) and
returns its python; `make test` makes it first (`python tests/fastmcp_venv.py`).

    python tests/fastmcp_venv.py     # make it (tests make it themselves when it is missing)
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["REQUIREMENTS", "ensure"]

REQUIREMENTS = ("fastmcp-tasks==4.1.4", "fastmcp-slim[server]==4.1.4", "mcp==2.3.0", "pydocket==0.27.2")
ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-fastmcp"
STAMP = VENV / ".installed"


def ensure() -> Path:
    """The FastMCP venv's python, made (under a lock: test workers may ask at once) if missing
    or made for other requirements."""
    want = "\n".join(REQUIREMENTS)
    python = VENV / "bin" / "python"
    if STAMP.exists() and STAMP.read_text() == want:
        return python
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(ROOT / ".venv-fastmcp.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if STAMP.exists() and STAMP.read_text() == want:
            return python
        shutil.rmtree(VENV, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *REQUIREMENTS],
            check=True,
        )
        STAMP.write_text(want)
    return python


if __name__ == "__main__":
    print(ensure())

"""What an installed tool-runtime says about itself: its version, its command's name, its license."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import runtime
from runtime import _version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SCRIPT = Path(sys.executable).parent / "tool-runtime"


def test_the_version_is_the_installed_distributions_and_not_part_of_star_imports() -> None:
    assert runtime.__version__ == importlib.metadata.version("tool-runtime") == PYPROJECT["version"]
    assert "__version__" not in runtime.__all__


def test_a_checkout_that_is_not_installed_reads_its_version_from_pyproject(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert _version._version() == PYPROJECT["version"]


def test_the_metadata_declares_the_license_file_and_where_to_read_more() -> None:
    meta = importlib.metadata.metadata("tool-runtime")
    assert meta["License-Expression"] == "Apache-2.0"
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert meta.get_all("Classifier")
    assert {url.split(",")[0] for url in meta.get_all("Project-URL") or []} >= {"Homepage", "Source"}


def run(*argv: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize("command", [(SCRIPT,), (sys.executable, "-m", "runtime")], ids=["script", "module"])
def test_both_commands_print_the_version(command: tuple[str | Path, ...]) -> None:
    if not Path(command[0]).exists():
        pytest.skip("the tool-runtime script is not installed in this environment")
    done = run(*command, "--version")
    assert (done.returncode, done.stdout) == (0, f"tool-runtime {runtime.__version__}\n")


def test_the_console_scripts_usage_line_says_its_own_name() -> None:
    if not SCRIPT.exists():
        pytest.skip("the tool-runtime script is not installed in this environment")
    assert run(SCRIPT).stderr.startswith("usage: tool-runtime ")
    assert run(sys.executable, "-m", "runtime").stderr.startswith("usage: python -m runtime ")


def test_the_console_script_imports_tools_from_the_current_folder(tmp_path: Path) -> None:
    if not SCRIPT.exists():
        pytest.skip("the tool-runtime script is not installed in this environment")
    (tmp_path / "my_tools.py").write_text(
        "from runtime import tool\n\n@tool\ndef greet(name: str) -> str:\n"
        '    """Greet someone."""\n    return f\'hello {name}\'\n'
    )
    done = run(SCRIPT, "call", "my_tools:greet", "greet", '{"name": "Ada"}', cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "hello Ada\n", "")

"""A newcomer's first hour (issue 46): what a new user meets before the first program runs.

1. the README's install commands need nothing a fresh virtual environment lacks; 4. no page nor
message installs `tool-runtime` by name from an index it is not on, and the Ray error names what
works; 6. `tool-runtime serve --app-dir DIR` serves a module of another folder (a desktop client
starts the command wherever it likes); 9. "serving 1 tool", and a tool without a description is
warned of once, where it is defined. (7 is in tests/test_integrations_langchain.py; the docs
site's items in tests/test_docs_site.py.)
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import tomllib
import venv
import warnings
from pathlib import Path

import pytest
import trio

from runtime import SimpleTool, ToolCall, open_runtime, tool
from runtime import mcp as rmcp
from runtime._extras import install_command
from runtime.exceptions import ToolDefinitionError, ToolDefinitionWarning

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SCRIPT = Path(sys.executable).parent / "tool-runtime"
RUN = (sys.executable, "-m", "runtime")
LIMIT = 30


def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


# -- 1. the README's install commands -------------------------------------------------------------


def test_the_readme_install_commands_need_nothing_a_fresh_venv_lacks(tmp_path: Path) -> None:
    install = section((ROOT / "README.md").read_text(), "Install")
    (commands,) = re.findall(r"```sh\n(.*?)```", install, re.DOTALL)
    lines = [line.split("#", 1)[0].strip() for line in commands.splitlines()]
    lines = [line for line in lines if line]
    assert lines, install
    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=True)
    python = fresh / "bin" / "python"
    for line in lines:
        program, *rest = line.split()
        # `python -m build` needs `build`, which a fresh venv does not have: every module a command
        # runs must be there already (pip is), and so must every program.
        assert program in ("pip", "python"), line
        modules = ["pip"] if program == "pip" else [rest[rest.index("-m") + 1]] if "-m" in rest else []
        for module in modules:
            found = subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=60)
            assert found.returncode == 0, f"{line!r} needs {module!r}, which a fresh venv lacks"


# -- 4. installs that work while nothing is on the package index --------------------------------


def test_no_page_or_message_installs_tool_runtime_by_name() -> None:
    # `pip install 'tool-runtime[ray]'` cannot work: the distribution is on no index yet.
    by_name = re.compile(r"pip install\s+['\"]?tool[-_]runtime(\[|['\"\s]|$)")
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "runtime").rglob("*.py")]
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in texts
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if by_name.search(line)
    ]
    assert found == []


def test_the_ray_error_names_the_packages_of_the_ray_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.placement._ray_link import ray_module

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    with pytest.raises(ToolDefinitionError) as raised:
        ray_module()
    (extra,) = PYPROJECT["optional-dependencies"]["ray"]
    assert str(raised.value) == (
        f"placement=Ray needs Ray: pip install '{extra}' (the `ray` extra; in a checkout: pip install '.[ray]')"
    )
    assert install_command("integrations").startswith("pip install 'langchain-core>=1.8'")


# -- 6. --app-dir ---------------------------------------------------------------------------------


def my_tools(folder: Path) -> Path:
    folder.mkdir()
    (folder / "my_tools.py").write_text(
        "from runtime import ToolRegistry, tool\n\n\n@tool\ndef greet(name: str) -> str:\n"
        '    """Greet someone."""\n    return f"hello {name}"\n\n\nregistry = ToolRegistry([greet])\n'
    )
    return folder


async def test_a_client_that_starts_serve_elsewhere_gets_the_tools_of_app_dir(tmp_path: Path) -> None:
    if not SCRIPT.exists():
        pytest.skip("the tool-runtime script is not installed in this environment")
    project = my_tools(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # As a desktop client's configuration: {"command": "tool-runtime", "args": ["serve", "--app-dir", ...]}
    spec = rmcp.stdio(
        str(SCRIPT),
        ["serve", "--app-dir", str(project), "my_tools:registry"],
        cwd=elsewhere,
        env={"PYTHONPATH": str(ROOT)},  # this checkout's runtime, whatever the script was installed from
        name="desk",
    )
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec], tracing=False) as rt:
            result = await rt.call(ToolCall(id="c1", name="greet", arguments={"name": "Ada"}))
    assert result.content == "hello Ada"


def test_without_app_dir_the_command_says_where_it_looked_and_what_to_give(tmp_path: Path) -> None:
    my_tools(tmp_path / "project")
    done = subprocess.run(
        [*RUN, "call", "my_tools:registry", "greet", "{}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: cannot import 'my_tools' (from {tmp_path}): ")
    assert done.stderr.rstrip().endswith("name the folder that holds it with --app-dir")
    done = subprocess.run(
        [*RUN, "call", "--app-dir", "project", "my_tools:registry", "greet", '{"name": "Ada"}'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, "hello Ada\n")


# -- 9. what the command and the definitions say -------------------------------------------------


def test_serving_one_tool_says_tool(tmp_path: Path) -> None:
    project = my_tools(tmp_path / "project")
    with subprocess.Popen(
        [*RUN, "serve", "--app-dir", str(project), "my_tools:registry", "--http", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    ) as server:
        try:
            assert server.stderr is not None
            line = server.stderr.readline()
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert re.fullmatch(r"serving 1 tool over MCP at http://127\.0\.0\.1:\d+/mcp\n", line), line


@dataclasses.dataclass
class Said:
    text: str


def test_a_tool_without_a_description_is_warned_of_once_where_it_is_defined() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        def shout(text: str) -> str:
            return text.upper()

        first = tool(shout)
        again = tool(shout)  # the same definition made a tool again: told once

        @tool
        def whisper(text: str) -> str:
            """Say it quietly."""
            return text.lower()

        class Echo(SimpleTool[Said]):
            name = "echo"

            async def execute(self, args: Said) -> str:
                return args.text

    told = [w for w in caught if issubclass(w.category, ToolDefinitionWarning)]
    assert [str(w.message).split(" (", 1)[0] for w in told] == ["tool 'shout'", "tool 'echo'"]
    assert "has no description: the model will be told nothing of what it does" in str(told[0].message)
    assert told[0].filename == __file__
    assert told[0].lineno == shout.__code__.co_firstlineno
    assert first.description == again.description == ""
    assert whisper.description == "Say it quietly."
    assert Echo.description == ""


def test_the_docs_say_what_the_warning_is_for() -> None:
    text = (ROOT / "docs" / "how-to" / "define-tools.md").read_text()
    assert "ToolDefinitionWarning" in text

"""Code mode's escape suite: every way out of the sandbox is refused or stopped, the host untouched.

Each attempt runs as a program through `run_code`, the way a model's program would. It is
refused (the program fails with the exception named, REJECTED, or catches it) or stopped (out of
time, memory, recursion, output), and afterwards the host is as it was: the canary file and the
directory it lives in unchanged, the environment's secret never shown, no process of ours but the
sandbox's workers. Run with `-s` to see each attempt's outcome and how long it took.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from runtime import FailureKind, ToolCall, ToolFailure, ToolSuccess, open_runtime, tool
from runtime.code import code_mode

SECRET = "code-mode-secret-4f1c"

# (name, program, what stops it: an exception name in the program's failure, or TIMEOUT)
ATTEMPTS: list[tuple[str, str, str]] = [
    ("import os, then os.system", "import os\nos.system('touch {canary}.made')", "AttributeError"),
    ("os.listdir", "import os\nos.listdir('{dir}')", "PermissionError"),
    ("os.remove", "import os\nos.remove('{canary}')", "PermissionError"),
    ("os.kill the host", "import os\nos.kill(os.getppid(), 9)", "AttributeError"),
    (
        "import subprocess",
        "import subprocess\nsubprocess.run(['touch', '{canary}.made'])",
        "ModuleNotFoundError",
    ),
    ("import socket", "import socket\nsocket.create_connection(('127.0.0.1', 22))", "ModuleNotFoundError"),
    ("import ctypes", "import ctypes\nctypes.CDLL(None)", "ModuleNotFoundError"),
    ("import shutil", "import shutil\nshutil.rmtree('{dir}')", "ModuleNotFoundError"),
    ("open() to read", "open('/etc/passwd').read()", "PermissionError"),
    ("open() to write", "open('{canary}', 'w').write('owned')", "PermissionError"),
    ("pathlib", "from pathlib import Path\nPath('{canary}').write_text('owned')", "PermissionError"),
    ("__import__", "__import__('os').system('id')", "NameError"),
    ("eval of __import__", "eval(\"__import__('subprocess')\")", "NameError"),
    ("exec of an import", "exec('import subprocess')", "ModuleNotFoundError"),
    ("compile", "compile('1', 'x', 'eval')", "NameError"),
    ("__subclasses__", "().__class__.__bases__[0].__subclasses__()", "AttributeError"),
    ("type.__subclasses__", "type.__subclasses__(object)", "AttributeError"),
    ("__globals__", "(lambda: 0).__globals__['__builtins__']", "AttributeError"),
    ("a builtin's __self__", "print.__self__", "AttributeError"),
    ("__builtins__", "__builtins__['open']", "NameError"),
    ("os.environ", "import os\nos.environ['CODE_MODE_SECRET']", "PermissionError"),
    ("os.getenv", "import os\nos.getenv('CODE_MODE_SECRET')", "PermissionError"),
    ("sys.modules", "import sys\nsys.modules['os']", "AttributeError"),
    ("infinite loop", "x = 0\nwhile True:\n    x += 1", "TIMEOUT"),
    ("huge allocation", "x = 'a' * (10 ** 10)\nlen(x)", "MemoryError"),
    ("growing list", "x = []\nwhile True:\n    x.append('a' * 1000000)", "MemoryError"),
    ("deep recursion", "def f(n):\n    return f(n + 1)\nf(0)", "RecursionError"),
    ("100 MB of prints", "for i in range(1000000):\n    print('x' * 99)", "MemoryError"),
    ("a million sleeps", "import time\nfor i in range(1000000):\n    time.sleep(0)", "RuntimeError"),
    ("sys.exit", "import sys\nsys.exit(1)", "AttributeError"),
    ("hidden tool", "await secret_tool()", "NameError"),
    ("the code tool itself", "await run_code(code='1')", "NameError"),
]

FIGURES: list[tuple[str, str, float]] = []


@tool
async def secret_tool() -> str:
    """A tool the program's view does not hold."""
    return SECRET


@tool
async def echo(text: str) -> str:
    """Echo."""
    return text


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "canary.txt"
    path.write_text("untouched")
    os.environ["CODE_MODE_SECRET"] = SECRET
    try:
        yield path
    finally:
        del os.environ["CODE_MODE_SECRET"]


@pytest.mark.parametrize(("name", "program", "stopped_by"), ATTEMPTS, ids=[a[0] for a in ATTEMPTS])
async def test_an_escape_attempt_is_refused_or_stopped_and_the_host_is_untouched(
    name: str, program: str, stopped_by: str, canary: Path
) -> None:
    before = _host(canary)
    run_code = code_mode(timeout=2.0 if stopped_by == "TIMEOUT" else 30.0)  # others are stopped by a limit
    async with open_runtime([echo, secret_tool, run_code], tracing=False) as rt:
        workers = {c.pid for c in psutil.Process().children()}
        code = program.format(canary=canary, dir=canary.parent)
        with rt.scoped(principal="mallory", exclude=["secret_tool"]) as view:
            start = time.perf_counter()
            result = await view.call(ToolCall(id="x", name="run_code", arguments={"code": code}))
            took = time.perf_counter() - start
            after = await view.call(
                ToolCall(id="y", name="run_code", arguments={"code": "await echo(text='ok')"})
            )
        spawned = {c.pid for c in psutil.Process().children()} - workers
        live = [psutil.Process(pid) for pid in spawned if psutil.pid_exists(pid)]
        assert all(p.name() == "monty" for p in live), live  # a killed worker's replacement, nothing else
    FIGURES.append((name, result.content.splitlines()[-1][:100] if result.content else "", took))
    assert isinstance(result, ToolFailure), f"{name}: the program ran to its end: {result}"
    if stopped_by == "TIMEOUT":
        assert result.kind is FailureKind.TIMEOUT
        assert took < 2.0 + 1.0  # stopped at the deadline, not after
        assert run_code.statistics().workers_killed == 1
    else:
        assert result.kind is FailureKind.REJECTED
        assert stopped_by in result.message, result.message
    assert SECRET not in result.content
    assert isinstance(after, ToolSuccess)  # the sandbox still serves the next program
    assert _host(canary) == before
    assert before[0] == "untouched"


def _host(canary: Path) -> tuple[str, list[str]]:
    """What a program must not change: the canary's text and its directory's names."""
    return canary.read_text(), sorted(p.name for p in canary.parent.iterdir())


def test_escape_figures() -> None:
    """Prints what stopped each attempt and how long it took (`pytest -s`)."""
    width = max((len(n) for n, _, _ in FIGURES), default=0)
    for name, outcome, took in FIGURES:
        print(f"{name:<{width}}  {took * 1000:8.1f} ms  {outcome}")

"""The Python blocks of README.md and docs/, run as the programs they show.

Used by tests/test_docs_blocks.py (every page, with the test environment's Python) and by
`make wheel-check` (README.md, with the Python of a fresh venv that has only the built wheel):

    python tools/doc_blocks.py README.md docs/tutorial/first-tool.md [--python PATH]

How to write a page's blocks (the convention this runner holds them to):

- Every ```python block is a complete program, run as a script (`python block.py`), with a
  folder of its page's own as the working directory, and must exit 0 (what it logs to stderr
  is its own business: the runtime logs a crashed tool's traceback, by design). No name may
  come from nowhere: imports, tools and registries are in the block.
- A block may continue the previous one of the same page when the page says so: the line
  right before its fence is `<!-- docs: continue -->`, and its title tells the reader
  (```` ```python title="agent.py (continued)" ````: mkdocs-material shows it above the code).
  The blocks of such a chain are joined and run once, as one program (so the first block can
  define the tools, the next one run them).
- A block that is a file the page's later programs (or commands) import: `<!-- docs: file -->`,
  its name in the block's title, where the rendered page shows it:
  ```` ```python title="my_tools.py" ````. It is written to the page's folder under that name
  (and imported once, to check it).
- A block that serves until stopped (an HTTP server): `<!-- docs: server -->`. It is started
  with `PORT` set to a free loopback port, the page's later programs run while it serves (with
  the same `PORT`), and at the end of the page it gets SIGINT and must exit 0. So such
  a server listens on `int(os.environ.get("PORT", "8000"))`, and its clients read the same.
- The output a program prints, shown to the reader: a ```text block right after it, marked
  `<!-- docs: output -->`. The program's stdout must be exactly that text (for a chain, the
  output blocks after its blocks, joined; trailing spaces do not count).
- A block that cannot run here (it needs a network service, a key, a person): the line before
  it is `<!-- docs: skip REASON -->`; the reason is required. Keep these rare: a program that
  needs a server can usually start one (an MCP server is a subprocess; an HTTP one a `server`).
- Every program runs with RAY_USAGE_STATS_ENABLED=0 and RAY_AUTH_MODE=disabled (as the tests
  run Ray), and without PYTHONPATH: it sees only what is installed.

Pages not held to this: docs/ARCHITECTURE.md, the design document, whose blocks sketch the
contract's signatures (`...` bodies, keyword-only markers in calls); its names are checked by
tests/test_exported_members.py instead. benchmarks/RESULTS.md has no Python blocks.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_HELD = {"docs/ARCHITECTURE.md": "the design document: its blocks sketch signatures, not programs"}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*docs:\s*(?P<kind>[a-z]+)\s*(?P<arg>.*?)\s*-->\s*$")
_KINDS = {"continue", "file", "server", "output", "skip"}
_TITLE = re.compile(r"""\btitle=(?P<quote>["'])(?P<title>.*?)(?P=quote)""")
_TIMEOUT = 300.0  # seconds one program may take (a Ray program starts a local Ray)


class PageError(Exception):
    """A page's block breaks the convention, or one of its programs failed."""


@dataclasses.dataclass
class Block:
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    kind: str | None  # the marker right before the fence, if any
    arg: str
    title: str = ""  # the fence's `title="..."`, shown above the code on the rendered page


@dataclasses.dataclass
class Program:
    page: str
    line: int  # where its first block starts
    code: str
    kind: str  # "run", "file", "server" or "skip"
    arg: str = ""  # the file name of a "file", the reason of a "skip"
    output: str | None = None  # the stdout the page shows for it
    blocks: int = 1

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, each with the marker comment right before it."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence = match["indent"], match["fence"]
        language = (match["info"].split() or [""])[0].lower()
        titled = _TITLE.search(match["info"])
        title = titled["title"] if titled is not None else ""
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not (
            lines[i].strip().startswith(fence[0] * len(fence)) and lines[i].strip().strip(fence[0]) == ""
        ):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1
        kind, arg = None, ""
        before = start - 1
        if before >= 0:
            marker = _MARKER.match(lines[before])
            if marker is not None:
                kind, arg = marker["kind"], marker["arg"]
                if kind not in _KINDS:
                    raise PageError(f"line {before + 1}: unknown marker 'docs: {kind}'")
        found.append(Block(start + 1, language, textwrap.dedent("\n".join(body)) + "\n", kind, arg, title))
    return found


def programs(path: Path, root: Path = ROOT) -> list[Program]:
    """The programs of one page, in page order."""
    page = path.resolve().relative_to(root).as_posix() if path.is_absolute() else path.as_posix()
    out: list[Program] = []
    for block in blocks(path.read_text(encoding="utf-8")):
        where = f"{page}:{block.line}"
        if block.kind == "output":
            if not out or out[-1].kind not in ("run", "server"):
                raise PageError(f"{where}: an output block must follow a program")
            out[-1].output = (out[-1].output or "") + block.code  # a chain's outputs, joined
            continue
        if block.language not in ("python", "py"):
            if block.kind is not None:
                raise PageError(f"{where}: 'docs: {block.kind}' marks a {block.language or 'plain'} block")
            continue
        if block.kind == "continue":
            if not out or out[-1].kind not in ("run", "server", "file"):
                raise PageError(f"{where}: 'docs: continue' with no program before it on the page")
            if "continued" not in block.title:
                raise PageError(
                    f"{where}: a block that continues the one above says so where the reader sees it: "
                    'its title, e.g. ```python title="agent.py (continued)"'
                )
            out[-1].code += "\n" + block.code
            out[-1].blocks += 1
        elif block.kind == "skip":
            if not block.arg:
                raise PageError(f"{where}: 'docs: skip' needs a reason")
            out.append(Program(page, block.line, block.code, "skip", block.arg))
        elif block.kind == "file":
            if block.arg:
                raise PageError(
                    f"{where}: the file's name goes in the block's title, where the rendered page shows "
                    f'it (```python title="{block.arg}"), not in the marker'
                )
            name = block.title
            if not re.fullmatch(r"[\w./-]+", name) or name.startswith(("/", "..")):
                raise PageError(
                    f"{where}: 'docs: file' needs a relative file name as the block's title, not {name!r}"
                )
            out.append(Program(page, block.line, block.code, "file", name))
        else:
            out.append(Program(page, block.line, block.code, block.kind or "run"))
    for program in out:
        if program.kind != "skip":
            try:
                compile(program.code, program.where, "exec")
            except SyntaxError as exc:
                raise PageError(f"{program.where}: not valid Python: {exc}") from None
    return out


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and every page of docs/ whose blocks are held to the convention."""
    found = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [p for p in found if p.relative_to(root).as_posix() not in NOT_HELD]


def _environment(port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        PORT=str(port),
        PYTHONUNBUFFERED="1",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",
        NO_COLOR="1",
    )
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _check(program: Program, done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        raise PageError(
            f"{program.where}: exit status {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
    if program.output is not None and _lines(done.stdout) != _lines(program.output):
        raise PageError(f"{program.where}: printed\n{done.stdout}\nbut the page shows\n{program.output}")


def _lines(text: str) -> list[str]:
    """The text's lines, without trailing spaces (which Markdown editors drop) or blank ends."""
    return [line.rstrip() for line in text.strip("\n").splitlines()]


@contextlib.contextmanager
def _serving(program: Program, script: Path, cwd: Path, env: dict[str, str], python: str) -> Iterator[None]:
    port = int(env["PORT"])
    log = cwd / f"{script.stem}.log"
    with log.open("w+") as sink:
        proc = subprocess.Popen(
            [python, script.name], cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise PageError(
                        f"{program.where}: the server exited ({proc.returncode}):\n{log.read_text()}"
                    )
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                if time.monotonic() > deadline:
                    raise PageError(f"{program.where}: the server did not listen on {port} within 60 s")
                time.sleep(0.1)
            yield
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    raise PageError(f"{program.where}: the server did not stop on SIGINT") from None
    if proc.returncode != 0:
        raise PageError(f"{program.where}: the server exited {proc.returncode} on SIGINT:\n{log.read_text()}")


def run_page(path: Path, *, python: str = sys.executable, root: Path = ROOT) -> list[Program]:
    """Run every program of a page in order, in a folder of its own; returns them.

    Raises:
        PageError: a block breaks the convention or a program failed (says which, and its output).
    """
    found = programs(path, root)
    with tempfile.TemporaryDirectory(prefix="doc-") as folder, contextlib.ExitStack() as servers:
        cwd = Path(folder)
        env = _environment(_free_port())
        for n, program in enumerate(found, 1):
            if program.kind == "skip":
                continue
            if program.kind == "file":
                target = cwd / program.arg
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(program.code, encoding="utf-8")
                if target.suffix == ".py" and "/" not in program.arg:
                    checked = Program(program.page, program.line, "", "run")
                    _check(checked, _run([python, "-c", f"import {target.stem}"], cwd, env))
                continue
            script = cwd / f"block_{n}.py"
            script.write_text(program.code, encoding="utf-8")
            if program.kind == "server":
                servers.enter_context(_serving(program, script, cwd, env, python))
                continue
            _check(program, _run([python, script.name], cwd, env))
    return found


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise PageError(f"{argv[-1]}: still running after {_TIMEOUT:.0f} s") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run the Python blocks of Markdown pages")
    parser.add_argument("pages", nargs="*", type=Path, help="default: README.md and docs/")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs them")
    args = parser.parse_args(argv)
    failed = 0
    for page in args.pages or pages():
        started = time.monotonic()
        try:
            found = run_page(page.resolve(), python=args.python)
        except PageError as exc:
            print(f"FAILED {page}: {exc}", file=sys.stderr)
            failed += 1
            continue
        ran = sum(p.blocks for p in found if p.kind != "skip")
        print(f"ok {page}: {ran} blocks in {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

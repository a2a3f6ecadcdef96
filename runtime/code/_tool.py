"""`code_mode(...)`: the tool `run_code(code: str)`, whose program calls the other tools.

    run_code = code_mode(timeout=30.0, max_calls=100)
    async with open_runtime([search, fetch, run_code]) as rt:
        with rt.scoped(principal="u1", prepare=run_code.prepare) as view:
            view.schemas("anthropic")        # run_code's description: stubs of search and fetch
            await view.call(ToolCall(id="1", name="run_code", arguments={"code": PROGRAM}))

A program runs in a sandbox (pydantic-monty's worker processes), in which every tool of the
view its call came through is an `async` function called with keyword arguments. Its calls are
calls like any other (see `_program`). The tool owns its pool of sandbox workers: started by its
`setup()`, closed by its `teardown()`, shared by the runtimes that run the same tool object.

Its description names the tools a program can call, as typed stubs, for the view it is shown
through, as that view describes them (its `descriptors()`: a tool its `prepare` hid is not
there, one it re-described is shown re-described): `describe(view)` (made again whenever the
view's tools or their descriptions change), `prepare` (give it to `rt.scoped(prepare=...)` and
the view's `schemas()` show it), `schemas(view, provider)` for a whole runtime.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Annotated, Any, ClassVar

import msgspec
import pydantic_monty as monty
import trio

from ..exceptions import ToolUnavailable
from ..registry import ToolRegistry
from ..schema import String, ToolDescriptor, render_tool
from ..tools import CallContext, Description, ToolBase
from ..tools.lowlevel import check_tool_name
from ._limits import CodeLimits
from ._program import Program, ProgramResult
from ._stubs import Stubs, render_stubs

__all__ = ["CodeArgs", "CodeStatistics", "CodeTool"]

_descriptor_codec = msgspec.msgpack.Encoder(enc_hook=repr)  # a key of descriptors' content
_Described = tuple[ToolDescriptor, Stubs]
"""The code tool's descriptor for a view, and the stubs in it."""
_Pinned = tuple[ToolRegistry, list[ToolDescriptor]]
"""What an entry cached by identity holds, so that the ids in its key stay theirs."""

_ABOUT = """Run a short Python program that calls the tools below, and get back its value and what it printed.

Write it as a module: the value of its last expression is the result (top-level `await` works, and so does `asyncio.run(main())`). Every tool is an `async` function called with keyword arguments: `x = await search(query="...")`. Calls awaited together run at once: `a, b = await asyncio.gather(f(x=1), g(y=2))`. Use it to chain several calls, loop over results and keep only what matters, instead of one tool call per turn.

A failed call raises an exception whose message says why: NameError (no such tool), TypeError (bad arguments), ValueError (refused), RuntimeError (the tool failed), TimeoutError, OSError (unavailable or overloaded: try later); catch them with `except Exception as e`.

The sandbox is a Python subset: no classes that inherit, no third-party modules, no files, environment, network or processes (only the tools); the standard modules it has include asyncio, json, re, math, datetime, random, collections, itertools, functools, dataclasses and typing."""


class CodeArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The code tool's one argument."""

    code: Annotated[str, Description("The Python program to run (its last expression is the result).")]


class CodeStatistics(msgspec.Struct, kw_only=True):
    """A code tool's counters (`CodeTool.statistics()` returns a copy)."""

    programs: int = 0
    """Programs started."""
    running: int = 0
    """Programs running now."""
    calls: int = 0
    """Tool calls made by programs."""
    sandbox_waits: int = 0
    """Trio tasks of this tool waiting on the sandbox now (a worker running a program's turn, the
    pool starting or closing): real time passes there that no trio deadline measures (a test's
    virtual clock must not jump meanwhile)."""
    workers_killed: int = 0
    """Sandbox workers killed (a program cancelled, out of time, or left in the middle)."""


class CodeTool(ToolBase[CodeArgs, ProgramResult], dynamic=True):
    """The code tool; make one with `code_mode(...)`.

    Attributes:
        limits: what each program may use.
    """

    timeout: float | None
    tool_type: ClassVar[str] = "function"

    def __init__(self, limits: CodeLimits, *, name: str = "run_code", description: str | None = None) -> None:
        self.name = check_tool_name(name)
        self.limits = limits
        self.timeout = limits.timeout
        self.max_concurrency = limits.workers
        self.args_type = CodeArgs
        self.result_type = ProgramResult
        base = _BASE.descriptor
        self._about = description if description is not None else _ABOUT
        self.descriptor = msgspec.structs.replace(base, name=self.name, description=self._about)
        self._codec = _BASE._codec
        self._pool: Any = None
        self._users = 0
        self._pool_lock = threading.Lock()
        self._counters = CodeStatistics()
        self._described: dict[bytes, _Described] = {}
        self._by_identity: dict[tuple[int, ...], tuple[_Pinned, _Described]] = {}
        self._describing: set[int] = set()
        self._described_lock = threading.Lock()

    # -- the pool of sandbox workers -------------------------------------------------

    async def setup(self) -> None:
        with self._waiting():
            await trio.to_thread.run_sync(self._acquire)

    async def teardown(self) -> None:
        with trio.CancelScope(shield=True), self._waiting():
            await trio.to_thread.run_sync(self._release)

    def _acquire(self) -> None:
        """One more runtime runs this tool: the pool starts with the first (in a worker thread;
        a thread lock, since runtimes on other threads may share the tool)."""
        with self._pool_lock:
            if self._pool is None:
                limits = self.limits
                pool = monty.Monty(
                    min_processes=1,
                    max_processes=limits.workers,
                    checkout_timeout=limits.timeout,
                    request_timeout=limits.timeout + 5.0,  # a backstop: the deadline kills first
                )
                pool.__enter__()
                self._pool = pool
            self._users += 1

    def _release(self) -> None:
        with self._pool_lock:
            self._users -= 1
            if self._users > 0 or self._pool is None:
                return
            pool, self._pool = self._pool, None
            pool.__exit__(None, None, None)

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[None]:
        self._counters.sandbox_waits += 1
        try:
            yield
        finally:
            self._counters.sandbox_waits -= 1

    # -- a call ----------------------------------------------------------------------

    async def execute(self, args: CodeArgs, ctx: CallContext) -> ProgramResult:
        view = ctx.runtime if ctx is not None else None
        pool = self._pool
        if view is None or pool is None:
            raise ToolUnavailable(f"{self.name} runs programs only as a tool of a running runtime")
        stubs = self._stubs_of(view)
        program = Program(
            ctx,
            view,
            stubs.by_python_name,
            self._code_tool_names(view),
            self.limits,
            self._counters,
            stubs.arguments,
        )
        return await program.run(pool, args.code)

    def result_to_text(self, result: ProgramResult) -> str:
        """What the model reads: the printed output, then the value (as JSON), when there are both."""
        value = result.result
        shown = None
        if value is not None:
            shown = value if isinstance(value, str) else _text(value)
        if not result.output:
            return shown if shown is not None else "(the program printed nothing and its value is None)"
        if shown is None:
            return result.output
        return f"{result.output.rstrip()}\n\nValue: {shown}"

    def statistics(self) -> CodeStatistics:
        """A copy of the counters (programs, calls, turns in flight, workers killed)."""
        return msgspec.structs.replace(self._counters)

    # -- its description, per view ---------------------------------------------------

    def describe(self, view: Any) -> ToolDescriptor:
        """This tool's descriptor as `view` shows it: its description with typed stubs of the
        tools `view` holds (a runtime, a scoped view, or a `ToolRegistry`); made again when they change."""
        return self._entry(view)[0]

    def prepare(self, view: Any, descriptor: ToolDescriptor) -> ToolDescriptor | None:
        """A `prepare` for `rt.scoped(prepare=...)`: this tool re-described for the view (the
        others as they are), so that `view.schemas(...)` carries the stubs. With a `prepare` of
        your own, call yours first and this one with what it returns (unless None)."""
        if descriptor.name != self.name:
            return descriptor
        key = id(view)
        with self._described_lock:
            if key in self._describing:  # asked while working out the view's tools: as it is
                return descriptor
            self._describing.add(key)
        try:
            return self.describe(view)
        finally:
            with self._described_lock:
                self._describing.discard(key)

    def schemas(
        self, view: Any, provider: str = "jsonschema", *, strict: bool = False
    ) -> list[dict[str, Any]]:
        """`view.schemas(provider)` with this tool described for `view` (for a runtime or a
        view made without `prepare=self.prepare`)."""
        return [
            render_tool(self.describe(view) if d.name == self.name else d, provider, strict=strict)
            for d in _descriptors_of(view)
        ]

    def _stubs_of(self, view: Any) -> Stubs:
        return self._entry(view)[1]

    def _entry(self, view: Any) -> _Described:
        """The descriptor and stubs for the tools `view` holds now, as `view` describes them (its
        `descriptors()`: what a view's `prepare` hid is not there, what it re-described is
        shown as re-described). Cached by those descriptors: first by the objects themselves and
        the registry's snapshot (a view keeps its descriptors while its tools stay; the entry
        holds them, so their ids stay theirs), then by their content (a new view of the same
        tools, described the same)."""
        registry = _registry_of(view)
        descriptors = _descriptors_of(view)
        same = (id(registry), *map(id, descriptors))  # a registry is immutable: its tools stay
        known = self._by_identity.get(same)
        if known is not None:
            return known[1]
        shown = []
        for d in descriptors:
            t = registry.get_or_none(d.name)
            if not isinstance(t, CodeTool):
                shown.append(_with_result(d, t))
        content = _descriptor_codec.encode(shown)
        entry = self._described.get(content)
        if entry is None:
            entry = self._render(shown)
        with self._described_lock:
            if len(self._described) >= 256:  # views come and go: keep it bounded
                self._described.clear()
            if len(self._by_identity) >= 256:
                self._by_identity.clear()
            self._described[content] = entry
            self._by_identity[same] = ((registry, descriptors), entry)
        return entry

    def _render(self, shown: list[ToolDescriptor]) -> _Described:
        stubs = render_stubs(shown)
        if shown:
            text = (
                f"{self._about}\n\nThe tools (a program calls them; they are not called directly):"
                f"\n\n```python\n{stubs.text}\n```"
            )
        else:
            text = f"{self._about}\n\n(No tools are available to programs now.)"
        return msgspec.structs.replace(self.descriptor, description=text), stubs

    def _code_tool_names(self, view: Any) -> frozenset[str]:
        return frozenset(t.name for t in _registry_of(view) if isinstance(t, CodeTool)) | {self.name}


def _registry_of(view: Any) -> ToolRegistry:
    """The tools of a runtime or a view (its `registry`), or a registry itself."""
    registry: ToolRegistry = view if isinstance(view, ToolRegistry) else view.registry
    return registry


def _descriptors_of(view: Any) -> list[ToolDescriptor]:
    """What a runtime, a view or a registry tells its model of each tool it holds (a view's:
    after its `prepare`)."""
    descriptors: list[ToolDescriptor] = view.descriptors()
    return descriptors


def _with_result(descriptor: ToolDescriptor, tool: Any) -> ToolDescriptor:
    """A tool's descriptor, with its result type when the descriptor leaves it out (`str`)."""
    if descriptor.output is None and tool is not None and getattr(tool, "result_type", None) is str:
        return msgspec.structs.replace(descriptor, output=String())
    return descriptor


def _text(value: Any) -> str:
    try:
        return msgspec.json.encode(value, enc_hook=str).decode()
    except (TypeError, ValueError):
        return str(value)


class _Base(ToolBase[CodeArgs, ProgramResult]):
    """Holds the codec and descriptor every CodeTool shares (built once, here)."""

    name = "run_code"

    async def execute(self, args: CodeArgs, ctx: CallContext) -> ProgramResult:  # pragma: no cover
        raise NotImplementedError


_BASE = _Base()

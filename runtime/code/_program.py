"""One program's run: the sandbox's stops answered from trio, its tool calls made through the runtime.

    feed_start(program)
      FunctionSnapshot  a tool       ->  the call starts (a task: `view.call`), the program gets
                                         a future and goes on (so `asyncio.gather` fans out)
                        not a tool   ->  the runtime answers at once (UNKNOWN_TOOL): NameError
                        an OS call   ->  PermissionError (files, environment, network, processes;
                                         the clock unless allowed), ModuleNotFoundError (imports)
      NameLookupSnapshot             ->  a tool's name is bound to its function; else NameError
      FutureSnapshot                 ->  wait until one of the calls it waits for is answered;
                                         resume with every answered one
      MontyComplete                  ->  the program's value and what it printed

Every call is a call like any other: the code call's view (principal, visible tools), its
deadline, its metadata (less the runtime's own keys, the trace headers, since the calls' spans
are children of the code call's span, the current one here, and the caller's idempotency key,
which names the code call), policies, budgets, spans. The program is one model turn, so its
calls are one batch (`one_batch`): `Budget(per_batch=N)` lets N of them run at once and the
others wait their turn within the deadline, as a `call_many`'s do. A failure comes back into
the program as an exception whose message is the text the model would have read
(`ToolFailure.content`), of the builtin type its kind maps to (`RAISED`).

A parameter whose name is no Python name (`from`, `to-addr`) is passed by the keyword its stub
shows (`from_`, `to_addr`: `Stubs.arguments`) and sent under its own name.

A call the program started and never awaited still runs to its end before the program's result
(it is never cut off half-way by the program ending); a program that fails, is cancelled or runs
out of time cancels the calls still running (each is answered CANCELLED) and kills its worker.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import pydantic_monty as monty
import trio

from ..engine.lowlevel import one_batch
from ..exceptions import ToolRejected
from ..features import CALL_ID_KEY, PRINCIPAL_KEY, TOOL_NAME_KEY
from ..messages import FailureKind, ToolCall, ToolFailure, ToolPending, ToolResult
from ._sandbox import Sandbox

__all__ = ["PENDING_RAISES", "RAISED", "Program", "ProgramResult"]

RAISED: Final[Mapping[FailureKind, str]] = {
    FailureKind.UNKNOWN_TOOL: "NameError",
    FailureKind.INVALID_ARGUMENTS: "TypeError",
    FailureKind.REJECTED: "ValueError",
    FailureKind.ERROR: "RuntimeError",
    FailureKind.TIMEOUT: "TimeoutError",
    FailureKind.CANCELLED: "RuntimeError",
    FailureKind.UNAVAILABLE: "OSError",
    FailureKind.OVERLOADED: "OSError",
}
"""The builtin exception a failed call raises in the program, by the failure's kind."""
PENDING_RAISES: Final = "PermissionError"
"""What a deferred call (`ToolPending`: it waits for an approval, or for its result from outside)
raises in the program: it has no value yet; its text says what it waits for, and it runs (once)
when the application decides, outside the program."""

FEED_GRACE: Final = 1.0
"""Seconds past the call's deadline after which the sandbox would stop a program on its own (the
deadline comes first: the host kills the worker then)."""

# Not passed on to a program's calls: the runtime's own keys (each call gets its own), the trace
# headers (the calls' spans are children of the code call's span, the current one), and the
# caller's idempotency key (it names the code call: every call of the program would share it).
_DROPPED_METADATA = frozenset(
    {CALL_ID_KEY, TOOL_NAME_KEY, PRINCIPAL_KEY, "traceparent", "tracestate", "idempotency_key"}
)
_CLOCK = frozenset({"time.time", "date.today", "datetime.now"})
_arguments = msgspec.json.Encoder()


class ProgramResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a program gave back: its value (the module's last expression) and what it printed."""

    result: Any = None
    output: str = ""


class _Waiter:
    """Wakes the program's task when one of the calls it waits for is answered."""

    __slots__ = ("event", "wanted")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.wanted: frozenset[int] = frozenset()


class Program:
    """One run of one program for one code call (made per call by the code tool)."""

    __slots__ = (
        "_arguments",
        "_calls",
        "_code_tools",
        "_ctx",
        "_deadline",
        "_limits",
        "_made",
        "_metadata",
        "_names",
        "_settled",
        "_view",
        "_visible",
        "_waiter",
        "counters",
    )

    def __init__(
        self,
        ctx: Any,
        view: Any,
        names: Mapping[str, str],
        code_tools: frozenset[str],
        limits: Any,
        counters: Any,
        arguments: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self._ctx = ctx
        self._view = one_batch(view)  # the program is one model turn: its calls are one batch
        self._names = names  # the program's names of the view's tools -> their tool names
        # tool name -> {the program's keyword -> the parameter's name}, where they differ
        self._arguments: Mapping[str, Mapping[str, str]] = arguments or {}
        self._visible = frozenset(names.values())
        self._code_tools = code_tools
        self._limits = limits
        self.counters = counters
        self._deadline = ctx.deadline if ctx.deadline is not None else trio.current_time() + limits.timeout
        metadata = ctx.metadata
        self._metadata = {k: v for k, v in metadata.items() if k not in _DROPPED_METADATA} or None
        self._made = 0
        self._settled: dict[int, Any] = {}
        self._waiter = _Waiter()
        self._calls: trio.Nursery | None = None

    async def run(self, pool: Any, code: str) -> ProgramResult:
        limits = self._limits
        remaining = self._deadline - trio.current_time()
        sandbox_limits: dict[str, Any] = {
            "max_memory": limits.max_memory,
            "max_recursion_depth": limits.max_recursion,
            "max_suspensions": limits.max_suspensions,
        }
        if 0 < remaining < math.inf:  # a backstop: the deadline kills the worker first
            sandbox_limits["max_feed_duration_secs"] = remaining + FEED_GRACE
        checkout = {
            "script_name": "program.py",
            "limits": sandbox_limits,
            "os_policy": {
                "datetime": "system" if limits.clock else "call_host",
                "sleep": "call_host",  # served here, on trio's clock
            },
        }
        printed = monty.CollectString(max_bytes=limits.max_output)
        sandbox = Sandbox(pool, checkout, self.counters, self.advance)
        self.counters.programs += 1
        self.counters.running += 1
        failed: monty.MontyError | None = None
        value: Any = None
        try:
            async with trio.open_nursery() as calls:
                self._calls = calls
                try:
                    value = await self._drive(sandbox, code, printed)
                except monty.MontyError as exc:  # the program's own failure: the code call's answer
                    failed = exc
                    calls.cancel_scope.cancel()  # the calls still running are answered CANCELLED
                except BaseException:
                    calls.cancel_scope.cancel()
                    raise
                finally:
                    await sandbox.close()
        except BaseExceptionGroup as group:  # what the program's task raised, alone: as it is
            if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], BaseExceptionGroup):
                raise group.exceptions[0] from None
            raise
        finally:
            self.counters.running -= 1
        if failed is not None:
            raise ToolRejected(_failed(failed, printed.output, limits))
        return ProgramResult(result=value, output=printed.output)

    async def _drive(self, sandbox: Sandbox, code: str, printed: Any) -> Any:
        snapshot, starts, ask = await sandbox.start(code, printed)
        while True:
            self._start(starts)
            kind = type(snapshot)
            if kind is monty.FutureSnapshot:
                answers = await self._answered(snapshot.pending_call_ids)
                step = functools.partial(snapshot.resume, answers)
            elif kind is monty.FunctionSnapshot:
                if ask is not None:  # a name the view does not hold: the runtime answers at once
                    answer = await self._ask(snapshot.call_id, ask)
                else:  # `time.sleep`: the program waits, on trio's clock
                    await trio.sleep(_seconds(snapshot))
                    answer = _NONE
                step = functools.partial(snapshot.resume, answer)
            elif kind is monty.MontyComplete:
                return snapshot.output
            else:  # a snapshot kind this monty added: stop rather than guess
                raise ToolRejected(f"the sandbox stopped for {kind.__name__}, which run_code cannot answer")
            snapshot, starts, ask = await sandbox.resume(step)

    # -- in the turn's thread: what needs no trio ------------------------------------

    def advance(self, snapshot: Any) -> tuple[Any, list[tuple[int, Any]], ToolCall | None]:
        """Answer the program's stops that need nothing of trio, here in the turn's thread (a
        refused OS call, a name, a bad call; a tool call or an `asyncio.sleep` gets its future
        and starts once the turn is back); return at the first that needs trio, with what to
        start, and the call to make first when that stop is a name the view does not hold.

        Runs only while the program's trio task waits on the turn: nothing else touches this
        program's state meanwhile.
        """
        starts: list[tuple[int, Any]] = []
        while True:
            kind = type(snapshot)
            if kind is monty.FunctionSnapshot:
                if snapshot.is_os_function:
                    name = snapshot.function_name
                    if name not in _SLEEPS:
                        snapshot = snapshot.resume(_refused(snapshot))
                        continue
                    seconds = _seconds(snapshot)
                    if seconds < 0:
                        snapshot = snapshot.resume(
                            _raise("TypeError", f"{name}() takes a number of seconds, not {snapshot.args!r}")
                        )
                    elif name in _ASYNC_SLEEPS:
                        starts.append((snapshot.call_id, seconds))
                        snapshot = snapshot.resume(_FUTURE)
                    else:
                        return snapshot, starts, None
                    continue
                decided = self._decide(snapshot)
                if isinstance(decided, dict):
                    snapshot = snapshot.resume(decided)
                elif decided.name in self._visible:
                    starts.append((snapshot.call_id, decided))
                    snapshot = snapshot.resume(_FUTURE)
                else:
                    return snapshot, starts, decided
            elif kind is monty.NameLookupSnapshot:
                # A tool read as a value (`f = search`) is its function; any other name is a
                # NameError, as in Python.
                name = snapshot.variable_name
                snapshot = snapshot.resume(value=_named(name)) if name in self._names else snapshot.resume()
            else:
                return snapshot, starts, None

    def _decide(self, snapshot: Any) -> ToolCall | dict[str, Any]:
        """The program's call of `snapshot.function_name`: the call to make, or the answer."""
        shown = snapshot.function_name
        name = self._names.get(shown, shown)
        if name in self._code_tools:
            return _raise("NameError", f"{shown}() cannot be called from a program (it runs programs)")
        if self._made >= self._limits.max_calls:
            return _raise(
                "RuntimeError",
                f"this program made {self._made} tool calls, the most one program may make; "
                "make fewer calls per program",
            )
        visible = name in self._visible
        if visible and snapshot.args:
            return _raise(
                "TypeError",
                f"{shown}() takes keyword arguments only (the tools' parameters have names), "
                f"got {len(snapshot.args)} positional",
            )
        kwargs = snapshot.kwargs
        renamed = self._arguments.get(name) if visible else None
        if renamed:
            sent: dict[str, Any] = {}
            for keyword, given in kwargs.items():
                parameter = renamed.get(keyword, keyword)
                if parameter in sent:
                    return _raise("TypeError", f"{shown}() got multiple values for argument {keyword!r}")
                sent[parameter] = given
            kwargs = sent
        try:
            arguments = _arguments.encode(kwargs).decode()
        except (TypeError, ValueError) as exc:
            if visible:
                return _raise("TypeError", f"{shown}(): the arguments are not JSON values: {exc}")
            arguments = "{}"
        self._made += 1
        return ToolCall(id=f"{self._ctx.call_id}.{snapshot.call_id}", name=name, arguments=arguments)

    # -- in trio: the calls ----------------------------------------------------------

    def _start(self, starts: list[tuple[int, Any]]) -> None:
        calls = self._calls
        assert calls is not None
        for monty_id, work in starts:
            if isinstance(work, ToolCall):
                self.counters.calls += 1
                calls.start_soon(self._run_call, monty_id, work)
            else:
                calls.start_soon(self._sleep, monty_id, work)

    async def _ask(self, monty_id: int, call: ToolCall) -> dict[str, Any]:
        """A call of a name the view does not hold: the runtime's answer (UNKNOWN_TOOL, with the
        closest names), raised where the program called, as Python raises a NameError."""
        self.counters.calls += 1
        result = await self._view.call(call, metadata=self._metadata, timeout=self._timeout())
        if isinstance(result, ToolFailure):
            return _raise(RAISED[result.kind], result.content)
        self._settled[monty_id] = _answer(result)  # the tool appeared meanwhile
        return _FUTURE

    async def _run_call(self, monty_id: int, call: ToolCall) -> None:
        result = await self._view.call(call, metadata=self._metadata, timeout=self._timeout())
        self._settle(monty_id, _answer(result))

    def _settle(self, monty_id: int, answer: dict[str, Any]) -> None:
        self._settled[monty_id] = answer
        waiter = self._waiter
        if monty_id in waiter.wanted:
            waiter.event.set()

    async def _sleep(self, monty_id: int, seconds: float) -> None:
        await trio.sleep(seconds)
        self._settle(monty_id, _NONE)

    async def _answered(self, pending: list[int]) -> dict[int, Any]:
        """The answers of the calls the program waits for, once at least one is in."""
        settled = self._settled
        if not any(i in settled for i in pending):
            waiter = self._waiter
            waiter.wanted = frozenset(pending)
            await waiter.event.wait()
            self._waiter = _Waiter()
            # Calls answered in the same instant go in the same resume (one turn, not several).
            await trio.lowlevel.cancel_shielded_checkpoint()
        return {i: settled.pop(i) for i in pending if i in settled}

    def _timeout(self) -> float | None:
        left = self._deadline - trio.current_time()
        return None if left == math.inf else max(left, 0.0)


_FUTURE: Final = {"future": ...}
_NONE: Final = {"return_value": None}
_ASYNC_SLEEPS = frozenset({"asyncio.sleep", "system.async_sleep"})
_SLEEPS = _ASYNC_SLEEPS | {"time.sleep", "system.sleep"}


def _named(name: str) -> Any:
    """A host function called `name`: bound to a name, the sandbox calls it by that name."""

    def function(**kwargs: Any) -> Any:  # never called here: its calls come back as snapshots
        raise AssertionError

    function.__name__ = function.__qualname__ = name
    return function


def _raise(exc_type: str, message: str) -> dict[str, Any]:
    return {"exc_type": exc_type, "message": message}


def _returned(result: ToolResult) -> dict[str, Any]:
    return {"return_value": _value(result)}


def _answer(result: ToolResult) -> dict[str, Any]:
    if isinstance(result, ToolFailure):
        return _raise(RAISED[result.kind], result.content)
    if isinstance(result, ToolPending):  # a program cannot wait for an approval: it has no value yet
        return _raise(PENDING_RAISES, result.content)
    return _returned(result)


def _value(result: Any) -> Any:
    """A tool's value as the program gets it: JSON's types (what its text shows the model)."""
    value = result.value
    if value is None or isinstance(value, str | int | float | bool):
        return value
    try:
        return msgspec.to_builtins(value, enc_hook=str, str_keys=True)
    except (TypeError, ValueError):
        return result.content


def _seconds(snapshot: Any) -> float:
    """A sleep's seconds (at least 0); -1 for what is not a number of seconds."""
    seconds = snapshot.args[0] if snapshot.args else 0
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds != seconds:
        return -1.0
    return max(float(seconds), 0.0)


def _refused(snapshot: Any) -> dict[str, Any]:
    """The answer to an OS call: none is served."""
    name = snapshot.function_name
    if name == "import":
        module = snapshot.args[0] if snapshot.args else "?"
        return _raise(
            "ModuleNotFoundError",
            f"No module named {module!r}: a program has only the sandbox's standard modules "
            "(asyncio, json, re, math, datetime, ...); call a tool for anything else",
        )
    if name in _CLOCK or name.startswith("time."):
        return _raise("PermissionError", "the clock is not available to programs here")
    return _raise(
        "PermissionError",
        f"{name}: a program has no files, environment, network or processes; call a tool instead",
    )


def _failed(exc: Any, output: str, limits: Any) -> str:
    """The text of a program that did not end well, for the model."""
    if isinstance(exc, monty.MontyCrashedError):
        what = f"The program's sandbox stopped: {exc}"
    elif isinstance(exc, monty.MontyRuntimeError | monty.MontySyntaxError):
        what = f"The program failed:\n{exc.display('traceback')}"
    else:
        display = getattr(exc, "display", None)
        what = f"The program failed:\n{display() if callable(display) else exc}"
    if "MemoryError" in what and len(output.encode()) >= limits.max_output - 4096:
        what += f"\n(it printed more than {limits.max_output} bytes, the limit)"
    if output:
        what += f"\n\nIt printed before it stopped:\n{output}"
    return what

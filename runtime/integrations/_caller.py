"""What every adapter needs of a runtime: the `Caller` protocol, tool selection, hidden tools.

The agent frameworks are asyncio programs and the runtime is a trio program, so an adapter
never holds a trio `Runtime`: it holds a `Caller`, an object with the runtime's registry and
its two awaitable call methods, usable from asyncio tasks.

- `AsyncioRuntime` (from `open_asyncio_runtime`, on the framework's own loop) is a `Caller`
  as it is, and so will be a scoped view of one (`rt.scoped(principal=, only=, exclude=)`).
- `RuntimeThread` is wrapped: its `acall` / `acall_many` are the awaitable calls, and its
  blocking `call_many` serves the frameworks' sync entry points (LangChain's `invoke`).

`caller_of` does that choice once, when an adapter is built.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol, Unpack, runtime_checkable

from ..embed import RuntimeThread
from ..engine import CallSettings, DetachedCall, DetachedStatus, Runtime
from ..exceptions import CallStateError, ToolRuntimeError
from ..messages import FailureKind, ToolCall, ToolFailure, ToolPending, ToolResult, echo
from ..registry import ToolRegistry

__all__ = [
    "BlockingCaller",
    "Caller",
    "Journaled",
    "RuntimeLike",
    "Selection",
    "ToolCallFailed",
    "caller_of",
    "merge",
    "new_call_id",
]


@runtime_checkable
class Caller(Protocol):
    """A runtime as the adapters see it: a registry and two calls awaited from asyncio.

    Every call gets exactly one result (a `ToolSuccess` or a `ToolFailure`); the only
    exception is the caller's own mistake (`RuntimeClosed`).
    """

    @property
    def registry(self) -> ToolRegistry: ...

    async def call(self, call: ToolCall, /, **settings: Unpack[CallSettings]) -> ToolResult: ...

    async def call_many(
        self, calls: Iterable[ToolCall], /, **settings: Unpack[CallSettings]
    ) -> list[ToolResult]: ...


@runtime_checkable
class BlockingCaller(Caller, Protocol):
    """A `Caller` that can also be called from sync code (a `RuntimeThread`)."""

    def call_many_blocking(
        self, calls: Iterable[ToolCall], /, **settings: Unpack[CallSettings]
    ) -> list[ToolResult]: ...


@runtime_checkable
class Journaled(Protocol):
    """A `Caller` whose deferred calls can be resumed: handles on its journal's entries (an
    `AsyncioRuntime` or a view of one, a `RuntimeThread`'s `aio`)."""

    def detached(self, id: str, *, principal: str | None = None) -> DetachedCall: ...

    async def detached_calls(self, *, principal: str | None = None) -> list[DetachedStatus]: ...


RuntimeLike = Caller | RuntimeThread
"""What the adapters accept: an `AsyncioRuntime` (or any `Caller`), or a `RuntimeThread`."""


def caller_of(runtime: RuntimeLike) -> Caller:
    """The `Caller` for `runtime`.

    Raises:
        TypeError: `runtime` is a trio `Runtime` (asyncio code cannot await it) or not a runtime.
    """
    if isinstance(runtime, RuntimeThread):
        return _ThreadCaller(runtime)
    if isinstance(runtime, Runtime):
        raise TypeError(
            "the agent frameworks run on asyncio and cannot call a trio Runtime; open the runtime with "
            "runtime.embed.open_asyncio_runtime(...) on the framework's loop, or use runtime.embed.RuntimeThread"
        )
    if isinstance(runtime, Caller):
        return runtime
    raise TypeError(
        f"expected an AsyncioRuntime (open_asyncio_runtime), a RuntimeThread or an object with `registry`, "
        f"`call` and `call_many`; got {type(runtime).__name__}"
    )


class _ThreadCaller:
    """A `RuntimeThread` as a `BlockingCaller`: its asyncio face (`rt.aio`), and its blocking
    `call_many` for the frameworks' sync entry points."""

    __slots__ = ("_thread",)

    def __init__(self, thread: RuntimeThread) -> None:
        self._thread = thread

    @property
    def registry(self) -> ToolRegistry:
        return self._thread.registry

    async def call(self, call: ToolCall, /, **settings: Unpack[CallSettings]) -> ToolResult:
        return await self._thread.aio.call(call, **settings)

    async def call_many(
        self, calls: Iterable[ToolCall], /, **settings: Unpack[CallSettings]
    ) -> list[ToolResult]:
        return await self._thread.aio.call_many(calls, **settings)

    def call_many_blocking(
        self, calls: Iterable[ToolCall], /, **settings: Unpack[CallSettings]
    ) -> list[ToolResult]:
        return self._thread.call_many(calls, **settings)

    def detached(self, id: str, *, principal: str | None = None) -> DetachedCall:
        return self._thread.aio.detached(id, principal=principal)

    async def detached_calls(self, *, principal: str | None = None) -> list[DetachedStatus]:
        return await self._thread.aio.detached_calls(principal=principal)


class Selection:
    """Which of a runtime's tools an adapter shows: `only` these names (None: all), minus `exclude`.

    A hidden tool is never listed to the framework, and a call of one never reaches the
    runtime: it is answered UNKNOWN_TOOL naming only the visible tools, so the model learns
    nothing of what it may not see.
    """

    __slots__ = ("exclude", "only")

    def __init__(self, only: Collection[str] | None = None, exclude: Collection[str] = ()) -> None:
        if isinstance(only, str) or isinstance(exclude, str):
            raise TypeError("`only` and `exclude` take a collection of tool names, not one string")
        self.only = None if only is None else frozenset(only)
        self.exclude = frozenset(exclude)

    @property
    def unrestricted(self) -> bool:
        """Every tool is shown."""
        return self.only is None and not self.exclude

    def shows(self, name: str) -> bool:
        return (self.only is None or name in self.only) and name not in self.exclude

    def visible(self, registry: ToolRegistry) -> ToolRegistry:
        """The tools of `registry` this selection shows, in the registry's order."""
        if self.unrestricted:
            return registry
        return ToolRegistry([t for t in registry if self.shows(t.name)])

    def check(self, registry: ToolRegistry) -> None:
        """For adapters that list the tools once: a name in `only` must be a tool.

        Raises:
            ValueError: `only` names a tool the registry does not have.
        """
        if self.only is None:
            return
        missing = sorted(self.only.difference(registry.names()))
        if missing:
            raise ValueError(
                "`only` names no tool of this runtime: "
                + "; ".join(registry.missing_message(name) for name in missing)
            )

    def sends(self, name: str, registry: ToolRegistry) -> bool:
        """Whether a call of `name` goes to the runtime (else `hidden` answers it here).

        With a selection, an unknown name is answered here too: the runtime's answer would
        list every tool, the hidden ones included.
        """
        return self.shows(name) and (self.unrestricted or name in registry)

    def hidden(self, call: ToolCall, registry: ToolRegistry) -> ToolFailure:
        """The answer to a call of a tool this selection hides (or that does not exist)."""
        return ToolFailure(
            call_id=call.id,
            tool=echo(call.name),
            kind=FailureKind.UNKNOWN_TOOL,
            message=self.visible(registry).missing_message(call.name),
        )

    def partition(
        self, calls: Sequence[ToolCall], registry: ToolRegistry
    ) -> tuple[list[ToolCall], dict[int, ToolFailure]]:
        """The calls to send to the runtime, and the answers (by position) of the hidden ones."""
        sent: list[ToolCall] = []
        answered: dict[int, ToolFailure] = {}
        for i, call in enumerate(calls):
            if self.sends(call.name, registry):
                sent.append(call)
            else:
                answered[i] = self.hidden(call, registry)
        return sent, answered


def merge(sent: list[ToolResult], answered: Mapping[int, ToolResult], total: int) -> list[ToolResult]:
    """Results in call order, from what the runtime answered and what was answered here."""
    served = iter(sent)
    return [answered[i] if i in answered else next(served) for i in range(total)]


class ToolCallFailed(ToolRuntimeError):
    """A call ended in a `ToolFailure`; given to a framework's error formatter.

    openai-agents' `failure_error_function` and LangChain's `handle_tool_error` take an
    exception; this is the one they get. `str()` is the text the model reads.

    Attributes:
        failure: the structured failure (`kind`, `message`, `call_id`, `tool`).
    """

    def __init__(self, failure: ToolFailure) -> None:
        self.failure = failure
        super().__init__(failure.content)


_ids = itertools.count(1)


def new_call_id(prefix: str) -> str:
    """An id for a call the framework gave none."""
    return f"{prefix}-{next(_ids)}"


# -- resuming a deferred call through a framework ------------------------------------------


def journal_of(caller: Caller) -> Journaled:
    """The journal side of `caller`, to resume the calls it deferred.

    Raises:
        TypeError: `caller` has no journal (a `Caller` of its own making without `detached`).
    """
    if isinstance(caller, Journaled):
        return caller
    raise TypeError(
        f"resuming a deferred call needs a runtime with `detached` and `detached_calls` (an AsyncioRuntime, "
        f"a view of one, or a RuntimeThread); got {type(caller).__name__}"
    )


async def find_deferred(
    caller: Caller, call_id: str, tool: str, arguments: str | None = None
) -> DetachedCall | None:
    """The journal's entry for the model's call `call_id` of `tool` (the newest, if the model
    reused an id), or None: the call was never deferred, or its entry is forgotten.
    `arguments`: the call's (JSON), when known: an entry of the same id with other arguments
    (another conversation's, whose model gave the same id) is not this call.

    For a framework that hands back the model's call id and not our `detached_id` (an
    approval in a serialized run state, a `DeferredToolResults` without its metadata).
    """
    journal = journal_of(caller)
    found = [
        s
        for s in await journal.detached_calls()
        if s.call_id == call_id
        and s.tool == tool
        and (arguments is None or same_arguments(s.arguments, arguments))
    ]
    if not found:
        return None
    newest = max(found, key=lambda s: s.created_at)
    return journal.detached(newest.id)


def same_arguments(a: str, b: str) -> bool:
    """Whether two calls' JSON arguments are the same (as values: spacing and key order aside)."""
    try:
        return bool(json.loads(a or "{}") == json.loads(b or "{}"))
    except ValueError:
        return a == b


def arguments_changed(status: DetachedStatus, arguments: str | Mapping[str, Any] | None) -> bool:
    """Whether `arguments` (edited by whoever approves) differ from the ones the call waits with."""
    if arguments is None:
        return False
    try:
        given = json.loads(arguments) if isinstance(arguments, str) else arguments
        return bool(given != json.loads(status.arguments))
    except ValueError:
        return True  # not JSON: the runtime's decoding says what is wrong with them


async def approved_result(
    handle: DetachedCall, arguments: str | Mapping[str, Any] | None = None
) -> ToolResult:
    """Approve the deferred call (with `arguments` when they were edited) and wait for its one result.

    An approval of a call already approved is the same call (it ran once); of a call that
    ended otherwise (denied, expired, cancelled) its result is that end.

    Raises:
        InvalidArguments: edited `arguments` that do not decode (the call stays pending).
    """
    status = await handle.status()
    if status.waiting_for == "approval":
        # decided elsewhere meanwhile (denied, expired): its end is the answer
        with contextlib.suppress(CallStateError):
            await handle.approve(arguments=arguments if arguments_changed(status, arguments) else None)
    return await handle.result()


async def denied(handle: DetachedCall, message: str) -> None:
    """Deny the deferred call with `message` (what the model reads); a call no longer waiting
    (decided or expired meanwhile) is left as it is."""
    with contextlib.suppress(CallStateError):
        await handle.deny(message)


def pending_metadata(pending: ToolPending) -> dict[str, Any]:
    """What a framework's deferred-call object carries of a `ToolPending` (JSON)."""
    return {
        "detached_id": pending.detached_id,
        "reason": pending.reason,
        "message": pending.message,
        "expires_at": pending.expires_at,
    }

"""Tool options: one frozen, validated type for `@tool(...)`, class attributes and MCP tools.

A tool declares its options where it is written (keywords of `@tool`, attributes of a tool
class); the engine reads them once, as a `ToolOptions`, when it starts the tool's actor.
Every value is checked at definition time, so a bad option is a `ToolDefinitionError` that
names the tool, never a surprise in the middle of a call.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, Literal, TypedDict

import msgspec

from ..exceptions import ToolDefinitionError
from ._placement import Placement

__all__ = ["Loop", "OnFull", "ToolOptions", "ToolOptionsKw"]

OnFull = Literal["wait", "reject"]
Loop = Literal["trio", "asyncio", "any"]


class ToolOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How the runtime serves one tool.

    Attributes:
        timeout: seconds a call may take before it fails with TIMEOUT (None: no limit of its own).
        max_concurrency: calls served at once (None: no limit for async tools; a sync tool
            gets the runtime's per-tool thread budget).
        mailbox_size: calls that may wait for this tool before callers wait too.
        on_full: "wait" (backpressure) or "reject" (OVERLOADED) when the mailbox is full.
        inline: run a sync tool on the event loop (fast, non-blocking code only; it cannot be
            interrupted, so it cannot have a `timeout`).
        restart_on: exceptions of the tool's own code after which its actor is restarted.
        setup_timeout: seconds `setup()` may take before the tool is marked down (None: no limit).
        placement: where the tool runs (None: in this process); see `runtime.placement`.
        loop: the event loop an `async def` tool's code runs on: "trio" (the runtime's own),
            or "asyncio" for code written for asyncio (asyncio.sleep, aiohttp, asyncpg...): it
            then runs on the host's asyncio loop, which needs a runtime embedded in one
            (`runtime.embed.open_asyncio_runtime`); opening any other runtime with such a
            tool is a ToolDefinitionError. "any" for code that runs on either loop (written
            for anyio, e.g. anyio.sleep or httpx, or awaiting only such code): it runs on its
            caller's loop, as a task of the host's asyncio loop when asyncio code calls it
            through `open_asyncio_runtime`, and on trio otherwise.
        requires_approval: ask before each call runs (True), or before the calls whose decoded
            arguments a predicate `(args) -> bool` picks; the question goes through the same path
            as `ctx.elicit` (the `on_elicit` handler, or the MCP client). Denied: REJECTED with
            the reason, and the tool does not run.
    """

    timeout: float | None = None
    max_concurrency: int | None = None
    mailbox_size: int = 1024
    on_full: OnFull = "wait"
    inline: bool = False
    restart_on: tuple[type[BaseException], ...] = ()
    setup_timeout: float | None = 30.0
    placement: Any = None
    loop: Loop = "trio"
    requires_approval: Any = False

    @classmethod
    def build(cls, what: str, values: Any) -> ToolOptions:
        """Options from `values` (a mapping, or an object whose attributes are the options).

        Raises:
            ToolDefinitionError: a value the runtime cannot honour; the message starts with `what`.
        """
        if isinstance(values, dict):
            unknown = sorted(set(values) - set(_DEFAULTS))
            if unknown:
                close = difflib.get_close_matches(unknown[0], list(_DEFAULTS), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ToolDefinitionError(
                    f"{what}: unknown option {unknown[0]!r}; {hint}the options are: {', '.join(_DEFAULTS)}"
                )
            fields = {name: values.get(name, default) for name, default in _DEFAULTS.items()}
            if isinstance(fields["restart_on"], list | set | frozenset):  # any iterable, as a keyword
                fields["restart_on"] = tuple(fields["restart_on"])
        else:
            fields = {name: getattr(values, name, default) for name, default in _DEFAULTS.items()}
        options = cls(**fields)
        options.check(what)
        return options

    def check(self, what: str) -> None:
        """Raise ToolDefinitionError (starting with `what`) if an option cannot be honoured."""
        for name in ("timeout", "setup_timeout"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
            ):
                raise ToolDefinitionError(
                    f"{what}: {name} must be a positive number of seconds or None, not {value!r}"
                )
        limit = self.max_concurrency
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ToolDefinitionError(
                f"{what}: max_concurrency must be a positive int or None, not {limit!r}"
            )
        size = self.mailbox_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ToolDefinitionError(f"{what}: mailbox_size must be a positive int, not {size!r}")
        if self.on_full not in ("wait", "reject"):
            raise ToolDefinitionError(f"{what}: on_full must be 'wait' or 'reject', not {self.on_full!r}")
        if not isinstance(self.inline, bool):
            raise ToolDefinitionError(f"{what}: inline must be True or False, not {self.inline!r}")
        if self.inline and self.timeout is not None:
            raise ToolDefinitionError(
                f"{what}: an inline tool runs on the event loop and cannot be interrupted, so its "
                f"timeout={self.timeout!r} could not be honoured; drop inline=True (it then runs in a "
                "worker thread, where a timeout works) or drop the timeout"
            )
        if self.loop not in ("trio", "asyncio", "any"):
            raise ToolDefinitionError(f"{what}: loop must be 'trio', 'asyncio' or 'any', not {self.loop!r}")
        approval = self.requires_approval
        if not isinstance(approval, bool) and not callable(approval):
            raise ToolDefinitionError(
                f"{what}: requires_approval must be True, False or a predicate (args) -> bool, "
                f"not {approval!r}"
            )
        placement = self.placement
        if placement is not None and not isinstance(placement, Placement):
            raise ToolDefinitionError(
                f"{what}: placement must be InProcess(), Subprocess(...) or Ray(...) "
                f"(from runtime.placement), not {placement!r}"
            )
        restart_on = self.restart_on
        if not isinstance(restart_on, tuple) or not all(
            isinstance(e, type) and issubclass(e, BaseException) for e in restart_on
        ):
            raise ToolDefinitionError(
                f"{what}: restart_on must be a tuple of exception classes, not {restart_on!r}"
            )


_DEFAULTS: dict[str, Any] = {name: getattr(ToolOptions(), name) for name in ToolOptions.__struct_fields__}


class ToolOptionsKw(TypedDict, total=False):
    """The options as keywords of `@tool(...)` (see `ToolOptions` for each)."""

    timeout: float | None
    max_concurrency: int | None
    mailbox_size: int
    on_full: OnFull
    inline: bool
    restart_on: tuple[type[BaseException], ...] | list[type[BaseException]]
    setup_timeout: float | None
    placement: Any
    loop: Loop
    requires_approval: bool | Callable[[Any], bool]

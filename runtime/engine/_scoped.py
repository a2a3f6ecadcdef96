"""`ScopedRuntime`, a request's view of a runtime, and the batch collectors `call_many` and
`as_completed` share with it (and with the embeddings)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..messages import ToolCall, ToolResult
from ..tools import ToolBase
from ._entry import STREAM_BUFFER, Entry
from ._scope import Scope, View

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = ["ScopedRuntime", "collect", "completed"]


class ScopedRuntime(View):
    """A per-request view of a `Runtime` (from `Runtime.scoped`): the runtime's call methods,
    for this view's principal and visible tools, and `registry` / `schemas` of what it sees."""

    def __init__(self, runtime: Runtime, scope: Scope) -> None:
        super().__init__(scope, runtime._routing)
        self._entry = runtime._entry
        self._ids = runtime._ids

    async def call(
        self, call: ToolCall, *, metadata: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> ToolResult:
        """`Runtime.call`, for this view."""
        return await self._entry.call(call, metadata=metadata, timeout=timeout, scope=self._check())

    async def call_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[ToolResult]:
        """`Runtime.call_many`, for this view."""
        return await collect(self._entry, list(calls), metadata, timeout, None, self._check())

    def as_completed(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[ToolResult]:
        """`Runtime.as_completed`, for this view."""
        return completed(self._entry, list(calls), metadata, timeout, None, self._check())

    def stream(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        buffer: int = STREAM_BUFFER,
    ) -> AsyncGenerator[str | ToolResult, None]:
        """`Runtime.stream`, for this view."""
        return self._entry.stream(
            call, metadata=metadata, timeout=timeout, scope=self._check(), buffer=buffer
        )

    async def invoke(
        self,
        tool: ToolBase[Any, Any] | str,
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        **arguments: Any,
    ) -> ToolResult:
        """`Runtime.invoke`, for this view."""
        name = tool if isinstance(tool, str) else tool.name
        call = ToolCall(id=f"invoke-{next(self._ids)}", name=name, arguments=arguments)
        return await self._entry.call(call, metadata=_metadata, timeout=_timeout, scope=self._check())


async def collect(
    entry: Entry,
    calls: list[ToolCall],
    metadata: Mapping[str, Any] | None,
    timeout: float | None,
    principal: str | None,
    scope: Scope | None,
) -> list[ToolResult]:
    results: list[Any] = [None] * len(calls)
    async with contextlib.aclosing(entry.batch(calls, metadata, timeout, principal, scope)) as chunks:
        async for chunk in chunks:
            for c in chunk:
                results[c.index] = c.result
    return results


async def completed(
    entry: Entry,
    calls: list[ToolCall],
    metadata: Mapping[str, Any] | None,
    timeout: float | None,
    principal: str | None,
    scope: Scope | None,
) -> AsyncGenerator[ToolResult]:
    # aclosing: a consumer that stops early closes this generator, and that must close the
    # batch too (cancelling its calls now), not leave it to the garbage collector.
    async with contextlib.aclosing(entry.batch(calls, metadata, timeout, principal, scope)) as chunks:
        async for chunk in chunks:
            for c in chunk:
                yield c.result  # type: ignore[misc]  # settled: DONE

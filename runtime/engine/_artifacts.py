"""Results over their limit, kept whole as artifacts (DESIGN 3.12), and the tools that read them.

`open_runtime(artifacts=Artifacts(...))` turns it on. Then a call's text, a text part or an
embedded text resource over the tool's `max_result_chars`, and a binary part (image, audio,
blob) over `max_inline_bytes`, is not cut: `ToolPlan.shape` hands the result to the `Keeper`,
which keeps each such piece in the runtime's `ArtifactStore` (per principal, content-addressed,
with a TTL and a cap on the whole) and shapes what the model reads instead:

    [artifact art_…: the result is 52,428,800 characters (text/plain), kept whole for 3600 s;
    its first 1,000 and last 1,000 characters follow. Read any part with read_artifact(...).]
    <the first characters>
    [… 52,426,800 characters not shown …]
    <the last characters>

and, beside it in `ToolSuccess.parts`, a `ResourceLinkPart` to `artifact://art_…` (over MCP a
`resource_link`, which the server serves with `resources/read`). A piece too large for the store
(over `max_bytes`) is cut as it would be without artifacts; a store that fails or hangs keeps it
in memory meanwhile (below).

Keeping is one flow (`ArtifactStore.keep_flow`): run in place when nothing in it waits (small
pieces, a MemoryStore), so such a call ends as any other; otherwise the call stays RUNNING while
a task of the runtime drives the flow (worker threads encode and hash the chunks, the store's
steps are awaited) and ends it then. Its deadline and its caller's cancellation stop that task
(TIMEOUT, CANCELLED), as they stop a tool: the task is the call's executor meanwhile. A store
other than memory is a `DegradingStore` (as the resilience policies' is) and each keeping's steps
run within its call's deadline: a store that hangs (a stopped Redis) or is locked (another
connection's SQLite transaction) is answered from memory for that call, never waited out, so
it never costs the call its result.

`Artifacts(tools=True)` also adds two tools the model calls with a handle it read
(engine/_artifact_tools.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import trio

from .._flows import drive
from ..messages import (
    AudioPart,
    ContentPart,
    FailureKind,
    ImagePart,
    ResourceLinkPart,
    ResourcePart,
    TextPart,
    ToolResult,
    ToolSuccess,
)
from ..stores import ArtifactInfo, ArtifactStore, DegradingStore, FolderStore, MemoryStore, StoreError
from ..tools import MAX_SECONDS, check_fields
from ._outcome import failure, success, truncate

if TYPE_CHECKING:
    from ._call import Call

__all__ = ["Artifacts", "Keeper"]

log = logging.getLogger("runtime.engine")

_Positive = Annotated[float, msgspec.Meta(gt=0, le=MAX_SECONDS)]
_Count = Annotated[int, msgspec.Meta(ge=1)]


class Artifacts(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a runtime keeps results that are over their limit (`open_runtime(artifacts=...)`).

    Attributes:
        store: where they are kept: None (memory, this process), a `runtime.stores` store
            (`SQLiteStore`, `RedisStore`: shared by processes; `FolderStore`), or a folder's
            path (files there).
        ttl: seconds an artifact is kept.
        max_bytes: the most all artifacts hold together (room is made in the principal that
            holds the most, its oldest first: a flood of one principal's results evicts its
            own, and each principal is sure of `max_bytes / principals`); a piece
            larger than this is cut instead.
        max_inline_bytes: a binary part (image, audio, blob) larger than this is kept as an
            artifact rather than sent (the text limit is `max_result_chars`).
        preview_chars: characters of the start and of the end of a kept text that the model
            reads (fewer when `max_result_chars` leaves less room).
        tools: add the tools `read_artifact` and `grep_artifact`, which read artifacts for the
            model (within its call's principal).
    """

    store: Any = None
    ttl: _Positive = 3600.0
    max_bytes: _Count = 256 << 20
    max_inline_bytes: _Count = 4 << 20
    preview_chars: _Count = 1000
    tools: bool = True

    def __post_init__(self) -> None:
        check_fields(self, skip=("store",))
        store = self.store
        if store is None or isinstance(store, str) or hasattr(store, "__fspath__"):
            return
        if not all(callable(getattr(store, op, None)) for op in ("get", "set", "delete", "keys")):
            raise ValueError(f"artifacts store must be a runtime.stores store or a folder, not {store!r}")

    def open(self) -> ArtifactStore:
        """The store these options describe (made when a runtime opens)."""
        store = self.store
        if isinstance(store, str) or hasattr(store, "__fspath__"):
            store = FolderStore(store)
        if store is not None and not isinstance(store, MemoryStore | DegradingStore):
            store = DegradingStore(store)  # a keeping's steps never wait out a store that hangs
        return ArtifactStore(store, ttl=self.ttl, max_bytes=self.max_bytes)


class _Keeping:
    """The executor of a call whose result is being kept: stopping it stops the keeping."""

    stuck = 0
    holds = False

    def start(self, call: Call[Any]) -> None:  # pragma: no cover - never admits a call
        raise AssertionError("the keeping of a result starts no call")

    def cancel(self, call: Call[Any]) -> None:
        scope = call.job
        if scope is not None:
            scope.cancel()


_KEEPING = _Keeping()


class Keeper:
    """Keeps the pieces of results that are over their limits (see the module), for one runtime."""

    def __init__(self, options: Artifacts, store: ArtifactStore) -> None:
        self.options = options
        self.store = store
        self.readable = options.tools  # the read tools are there: the note names them
        self._nursery: trio.Nursery | None = None

    @property
    def nursery(self) -> trio.Nursery | None:
        """Where a keeping that waits runs, and what the store wrote to memory during an outage
        is copied back from (`DegradingStore.copy_back_in`): the runtime's, set when it opens."""
        return self._nursery

    @nursery.setter
    def nursery(self, nursery: trio.Nursery | None) -> None:
        self._nursery = nursery
        store = self.store.store
        if isinstance(store, DegradingStore):
            store.copy_back_in(nursery)

    def over(self, parts: tuple[ContentPart, ...], limit: int) -> bool:
        """Whether a part is over its limit (a text over `limit` characters, binary data over
        `max_inline_bytes`)."""
        big = self.options.max_inline_bytes
        for part in parts:
            if isinstance(part, TextPart):
                if len(part.text) > limit:
                    return True
            elif isinstance(part, ImagePart | AudioPart):
                if len(part.data) > big:
                    return True
            elif isinstance(part, ResourcePart) and (
                (part.text is not None and len(part.text) > limit) or len(part.blob or b"") > big
            ):
                return True
        return False

    def keep(
        self,
        call: Call[Any],
        tool: str,
        limit: int,
        value: Any,
        text: str,
        parts: tuple[ContentPart, ...],
        wait: bool = True,
    ) -> ToolResult | None:
        """The call's result with what is over its limits kept; None: keeping has to wait, and
        the call ends (`Call.kept`) once it is done. `wait=False`: cut what cannot be kept at once
        (a policy's answer, which no executor runs)."""
        return self._run(
            call,
            self._flow(call, tool, limit, value, text, parts),
            lambda: success(call.call, tool, value, text, parts, limit),
            wait,
        )

    def keep_collected(
        self, call: Call[Any], tool: str, limit: int, collected: Any, wait: bool = True
    ) -> ToolResult | None:
        """The result of a stream that went past its limit (`_plan.Collected`): kept whole from
        its temporary file, never read whole into memory (cut, if it cannot be kept)."""

        def cut() -> ToolResult:
            text = collected.cut()
            return ToolSuccess(call_id=call.call.id, tool=tool, content=text, value=text)

        return self._run(call, self._collected_flow(call, tool, limit, collected), cut, wait)

    def _run(
        self,
        call: Call[Any],
        flow: Generator[Any, Any, ToolResult],
        cut: Callable[[], ToolResult],
        wait: bool,
    ) -> ToolResult | None:
        """Run a keeping flow here as far as it goes without waiting; if it must wait, a task of
        the runtime drives the rest (None: the call ends when it is done), or with `wait=False`
        the result is cut instead."""
        try:
            step = flow.send(None)
        except StopIteration as stop:
            result: ToolResult = stop.value
            return result
        if not wait:
            flow.close()
            return cut()
        nursery = self.nursery
        assert nursery is not None  # bound when the runtime opened
        scope = trio.CancelScope()
        call.executor = _KEEPING
        call.job = scope
        nursery.start_soon(self._finish, call, flow, step, scope)
        return None

    async def _finish(
        self, call: Call[Any], flow: Generator[Any, Any, ToolResult], step: Any, scope: trio.CancelScope
    ) -> None:
        result: ToolResult | None = None
        try:
            with scope:
                result = await drive(flow, pending=step)
        except Exception as exc:  # a bug of its own: this call's ERROR, never the runtime's
            log.exception("keeping the result of call %s as an artifact failed", call.call.id)
            result = failure(
                call.call, FailureKind.ERROR, f"the result could not be kept: {type(exc).__name__}: {exc}"
            )
        if result is None:  # stopped: its deadline, or its caller gave up
            call.stopped()
        else:
            call.kept(result)

    # -- the flow -----------------------------------------------------------------------------

    def _flow(
        self, call: Call[Any], tool: str, limit: int, value: Any, text: str, parts: tuple[ContentPart, ...]
    ) -> Generator[Any, Any, ToolResult]:
        links: list[ContentPart] = []
        content = text
        if len(text) > limit:
            mime = "text/plain" if isinstance(value, str) else "application/json"
            info = yield from self._piece(call, text, mime)
            if info is None:
                content = truncate(text, limit)
            else:
                content = self._note(info, text, limit, "the result")
                links.append(_link(info))
        shaped: list[ContentPart] = []
        for part in parts:
            shaped.extend((yield from self._part(call, part, limit)))
        if links and not parts:
            shaped = [TextPart(text=content), *links]  # the link rides beside the text (MCP: resource_link)
        return ToolSuccess(call_id=call.call.id, tool=tool, content=content, value=value, parts=tuple(shaped))

    def _collected_flow(
        self, call: Call[Any], tool: str, limit: int, collected: Any
    ) -> Generator[Any, Any, ToolResult]:
        file, chars = collected.file, collected.chars
        try:
            try:
                info = yield from self.store.keep_file_flow(
                    call.principal, file, chars, "text/plain", deadline=call.expires
                )
            except ValueError as exc:  # over the store's max_bytes
                log.info("call %s: a stream's result is not kept: %s", call.call.id, exc)
                info = None
            except (StoreError, OSError) as exc:
                log.warning("call %s: a stream's result could not be kept (%s); it is cut", call.call.id, exc)
                info = None
            if info is None:
                text = collected.cut()
                return ToolSuccess(call_id=call.call.id, tool=tool, content=text, value=text)
            ctx = call.ctx
            if ctx is not None:
                ctx.add_event(
                    "tool.artifact", {"tool.artifact.handle": info.handle, "tool.artifact.bytes": info.size}
                )
            each = max(0, min(self.options.preview_chars, chars // 2))
            file.seek(0)
            start = file.read(each)
            end = _tail(file, chars, each)
            content = self._note_of(info, chars, start, end, limit, "the result")
            return ToolSuccess(
                call_id=call.call.id,
                tool=tool,
                content=content,
                value=content,
                parts=(TextPart(text=content), _link(info)),
            )
        finally:
            collected.close()

    def _part(self, call: Call[Any], part: ContentPart, limit: int) -> Generator[Any, Any, list[ContentPart]]:
        """A part as the model gets it: as it is, or (over its limit) a note and a link."""
        big = self.options.max_inline_bytes
        if isinstance(part, TextPart) and len(part.text) > limit:
            info = yield from self._piece(call, part.text, "text/plain")
            if info is None:
                return [TextPart(text=truncate(part.text, limit))]
            return [TextPart(text=self._note(info, part.text, limit, "this part")), _link(info)]
        if isinstance(part, ResourcePart) and part.text is not None and len(part.text) > limit:
            info = yield from self._piece(call, part.text, part.mime_type or "text/plain")
            if info is None:
                return [msgspec.structs.replace(part, text=truncate(part.text, limit))]
            return [
                TextPart(text=self._note(info, part.text, limit, f"the resource {part.uri}")),
                _link(info),
            ]
        data: bytes | None = None
        if isinstance(part, ImagePart | AudioPart):
            data = part.data
        elif isinstance(part, ResourcePart):
            data = part.blob
        if data is not None and len(data) > big:
            mime = part.mime_type or "application/octet-stream"  # type: ignore[union-attr]  # a media part
            info = yield from self._piece(call, data, mime)
            if info is not None:
                return [TextPart(text=self._binary_note(info, part)), _link(info)]
        return [part]

    def _piece(
        self, call: Call[Any], data: str | bytes, mime: str
    ) -> Generator[Any, Any, ArtifactInfo | None]:
        """Keep one piece for the call's principal; None if it cannot be kept (too large, the store failed)."""
        try:
            info = yield from self.store.keep_flow(call.principal, data, mime, deadline=call.expires)
        except ValueError as exc:  # over the store's max_bytes
            log.info("call %s: a piece of its result is not kept: %s", call.call.id, exc)
            return None
        except (StoreError, OSError) as exc:
            log.warning(
                "call %s: its result could not be kept as an artifact (%s); it is cut", call.call.id, exc
            )
            return None
        ctx = call.ctx
        if ctx is not None:
            ctx.add_event(
                "tool.artifact", {"tool.artifact.handle": info.handle, "tool.artifact.bytes": info.size}
            )
        return info

    # -- what the model reads -------------------------------------------------------------------

    def _how(self, info: ArtifactInfo) -> str:
        """The one sentence on how to read more."""
        if not self.readable:
            return f"Read any part of it as the resource {info.uri} (MCP resources/read)."
        if info.is_text:
            return (
                f'Read any part with read_artifact(handle="{info.handle}", offset=0, length=20000), or '
                f'find lines with grep_artifact(handle="{info.handle}", pattern="...").'
            )
        return f'Read it in base64 with read_artifact(handle="{info.handle}", offset=0, length=20000).'

    def _note(self, info: ArtifactInfo, text: str, limit: int, what: str) -> str:
        """What the model reads of a kept text: the handle, the size, the start and the end, and how
        to read more; at most `limit` characters."""
        each = max(0, min(self.options.preview_chars, len(text) // 2))
        return self._note_of(info, len(text), text[:each], text[len(text) - each :], limit, what)

    def _note_of(self, info: ArtifactInfo, total: int, start: str, end: str, limit: int, what: str) -> str:
        """`_note` from the text's length and its first and last characters (a preview's worth)."""
        head = (
            f"[artifact {info.handle}: {what} is {total:,} characters ({info.mime_type}), kept whole "
            f"for {self.store.ttl:g} s; its first and last characters follow. {self._how(info)}]\n"
        )
        room = limit - len(head) - 64  # the line between the two ends
        each = max(0, min(len(start), len(end), room // 2))
        if each == 0:
            return head[:limit]
        start, end = start[:each], end[len(end) - each :]
        cut = start.rfind("\n")  # whole lines where the text has lines
        if cut > 0:
            start = start[: cut + 1]
        cut = end.find("\n")
        if 0 <= cut < len(end) - 1:
            end = end[cut + 1 :]
        hidden = total - len(start) - len(end)
        return f"{head}{start}[… {hidden:,} characters not shown …]\n{end}"

    def _binary_note(self, info: ArtifactInfo, part: ContentPart) -> str:
        kind = (
            "an image"
            if isinstance(part, ImagePart)
            else "audio"
            if isinstance(part, AudioPart)
            else "a blob"
        )
        return (
            f"[artifact {info.handle}: {kind} ({info.mime_type}) of {info.size:,} bytes, too large to "
            f"send here, kept whole for {self.store.ttl:g} s. {self._how(info)}]"
        )


def _tail(file: Any, chars: int, each: int) -> str:
    """The last `each` characters of a text file of `chars` characters, read through in chunks
    (bounded memory: a chunk and the tail)."""
    if each <= 0:
        return ""
    file.seek(0)
    tail = ""
    while piece := file.read(1 << 20):
        tail = (tail + piece)[-each:]
    return tail


def _link(info: ArtifactInfo) -> ResourceLinkPart:
    unit = f"{info.chars:,} characters" if info.chars is not None else f"{info.size:,} bytes"
    return ResourceLinkPart(
        uri=info.uri,
        name=info.handle,
        mime_type=info.mime_type,
        description=f"a result of {unit}, kept whole",
        size=info.size,
    )

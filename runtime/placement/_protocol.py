"""The messages between the runtime and a tool's worker (a subprocess or a Ray replica).

Every message is a frozen msgspec Struct of one tagged union, encoded as MessagePack; over a
subprocess's pipes each travels as a frame: a 4-byte big-endian length, then the bytes.

    runtime -> worker   Load (once), then Request ..., then Stop
    worker -> runtime   Ready | Raised (to Load); to each Request any number of Progress and
                        LogRecord (the tool's `ctx.report_progress` / `ctx.log`), then Done | Raised;
                        a large result's text or value comes first as Pieces (`_pieces`)

A success travels as the same `ToolSuccess` the engine returns in-process; an exception as
`Raised`, boxed where it happened (type name, message; the traceback is logged there).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ..messages import ToolSuccess

__all__ = [
    "MAX_FRAME",
    "Done",
    "Piece",
    "Load",
    "LogRecord",
    "Progress",
    "Raised",
    "Ready",
    "Reply",
    "Request",
    "Stop",
    "ToWorker",
    "decode_reply",
    "decode_to_worker",
    "encode",
    "encode_request",
    "frame",
]

MAX_FRAME = 1 << 30  # a larger length prefix means the stream is corrupt

ErrorCategory = Literal["error", "rejected", "invalid", "unavailable", "overloaded", "memory"]


class Load(msgspec.Struct, frozen=True, kw_only=True, tag="load", tag_field="type"):
    """Import the tool and run its `setup()`.

    Attributes:
        ref: `module:qualname` of the tool.
        name: its name in the runtime.
        sys_path: the runtime's `sys.path` (so the worker imports what the runtime imports).
        main: the runtime's `__main__` script, for tools defined there.
        max_memory_mb: the hard cap on the worker's address space (RLIMIT_AS), once loaded.
        max_rss_mb: after a call that leaves the worker above this, it asks to be retired.
        spin_us: microseconds the worker polls for the next request before it sleeps (0: none).
    """

    ref: str
    name: str
    sys_path: list[str] = []
    main: str | None = None
    max_memory_mb: int | None = None
    max_rss_mb: int | None = None
    spin_us: int = 0


class Request(msgspec.Struct, frozen=True, kw_only=True, tag="request", tag_field="type"):
    """One call: the arguments as the engine checked them, its context and its trace parent.

    Attributes:
        call_id: the call's id.
        arguments: JSON bytes, decoded by the tool's own codec in the worker.
        metadata: the call's merged metadata (values that do not encode travel as text).
        traceparent: W3C trace context of the call's span (the worker's work continues it).
        tracestate: W3C trace state, if any.
        timeout: seconds left before the call's deadline (None: none).
    """

    call_id: str
    arguments: bytes
    metadata: dict[str, Any] = {}
    traceparent: str | None = None
    tracestate: str | None = None
    timeout: float | None = None
    hears_progress: bool = False


class Stop(msgspec.Struct, frozen=True, kw_only=True, tag="stop", tag_field="type"):
    """Run `teardown()` and exit."""


class Ready(msgspec.Struct, frozen=True, kw_only=True, tag="ready", tag_field="type"):
    """The tool is loaded and set up.

    Attributes:
        pid: the worker's process id.
        node: the Ray node it runs on (hex id; None for a Subprocess worker).
    """

    pid: int
    node: str | None = None


class Done(msgspec.Struct, frozen=True, kw_only=True, tag="done", tag_field="type"):
    """A call returned.

    Attributes:
        result: the success, as the engine would have built it in-process (text, parts, value).
        retire: the worker is above its `max_rss_mb`: replace it.
        streamed: the fields of `result` that came before as pieces, in their order (here
            empty: `_pieces.assemble` puts them in).
        value_is_content: the value is the text itself (a text result), sent once, as `content`.
    """

    result: ToolSuccess[Any]
    retire: bool = False
    streamed: tuple[Literal["content", "value"], ...] = ()
    value_is_content: bool = False


class Raised(msgspec.Struct, frozen=True, kw_only=True, tag="raised", tag_field="type"):
    """The tool (or its setup) raised.

    Attributes:
        category: how the engine maps it (`error` -> ERROR, `rejected` -> REJECTED,
            `invalid` -> INVALID_ARGUMENTS, `unavailable` -> UNAVAILABLE, `overloaded` ->
            OVERLOADED, `memory`: a
            MemoryError, ERROR, and the worker is retired).
        error_type: the exception's qualified type name.
        message: its message (for `invalid`, what was expected).
        path: for `invalid`, the JSON path of the bad value.
        restart: it is one of the tool's `restart_on` exceptions.
        retire: the worker should be replaced after this call.
    """

    category: ErrorCategory
    error_type: str
    message: str
    path: str = "$"
    restart: bool = False
    retire: bool = False


class Progress(msgspec.Struct, frozen=True, kw_only=True, tag="progress", tag_field="type"):
    """The tool called `ctx.report_progress(progress, total, message)` during the call."""

    progress: float
    total: float | None = None
    message: str | None = None


class LogRecord(msgspec.Struct, frozen=True, kw_only=True, tag="log", tag_field="type"):
    """The tool called `ctx.log(level, message, **data)` during the call."""

    level: str
    message: str
    data: dict[str, Any] = {}


class Piece(msgspec.Struct, frozen=True, kw_only=True, tag="piece", tag_field="type"):
    """A piece of a large result, before the `Done` it belongs to (the scheme: `_pieces`).

    Attributes:
        op: `text`, `list` and `map` open a value, `end` closes it; `chars` is text of the open
            text, `items` elements of the open list, `entries` entries of the open map; `key`
            names the entry of the open map that the next value is; `leaf` is a whole value.
        data: the text, elements, entries, key or value.
    """

    op: Literal["text", "list", "map", "end", "chars", "items", "entries", "key", "leaf"]
    data: Any = None


ToWorker = Load | Request | Stop
Reply = Ready | Done | Raised | Progress | LogRecord | Piece

_encoder = msgspec.msgpack.Encoder()
_request_encoder = msgspec.msgpack.Encoder(enc_hook=str)  # metadata values that do not encode travel as text
_to_worker = msgspec.msgpack.Decoder(ToWorker)
_reply = msgspec.msgpack.Decoder(Reply)


def encode(message: ToWorker | Reply) -> bytes:
    """The message as MessagePack bytes."""
    return _encoder.encode(message)


def encode_request(request: Request | LogRecord) -> bytes:
    """A request (or a log record) as MessagePack bytes; values it cannot carry travel as text."""
    return _request_encoder.encode(request)


def frame(message: ToWorker | Reply) -> bytes:
    """The message as one frame: its length (4 bytes, big-endian), then its bytes."""
    body = _encoder.encode(message)
    return len(body).to_bytes(4, "big") + body


def decode_to_worker(data: bytes) -> ToWorker:
    result: ToWorker = _to_worker.decode(data)
    return result


def decode_reply(data: bytes | bytearray | memoryview) -> Reply:
    """The message in `data`; a text result's value (sent once, as its text) is put back."""
    result: Reply = _reply.decode(data)
    if isinstance(result, Done) and result.value_is_content and not result.streamed:
        value = msgspec.structs.replace(result.result, value=result.result.content)
        return msgspec.structs.replace(result, result=value, value_is_content=False)
    return result

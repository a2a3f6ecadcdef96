"""The outcome mapping: what a call's result is, from what its tool returned or raised.

One place decides the ToolResult of every way a call can end, as pure functions of the call
and the value or exception. Whether an exception also restarts the tool's actor is decided
elsewhere (`ToolActor`), and only for the tool's own code.

| what happened | kind |
|---|---|
| decoding the arguments raised (not JSON, wrong type, too deep, not Unicode...) | INVALID_ARGUMENTS |
| the tool raised ToolRejected (validate / fail) | REJECTED |
| the tool raised InvalidArguments (its own decode) | INVALID_ARGUMENTS |
| the tool raised ToolUnavailable (its backend is gone) | UNAVAILABLE |
| the tool (or its placement) raised ToolOverloaded (too many waiting) | OVERLOADED |
| the tool raised anything else (KeyboardInterrupt, SystemExit, a stray Cancelled too) | ERROR |
| turning the result into text or parts raised | ERROR |
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..exceptions import InvalidArguments, RemoteToolError, ToolOverloaded, ToolRejected, ToolUnavailable
from ..messages import ContentPart, FailureKind, TextPart, ToolCall, ToolFailure, ToolSuccess, echo

__all__ = [
    "describe_error",
    "exception_failure",
    "failure",
    "input_failure",
    "success",
    "truncate",
    "cut_note",
]


def failure(call: ToolCall, kind: FailureKind, message: str, error_type: str | None = None) -> ToolFailure:
    """A failure answering `call`."""
    return ToolFailure(call_id=call.id, tool=call.name, kind=kind, message=message, error_type=error_type)


def describe_error(exc: BaseException) -> tuple[str, str]:
    """(qualified type, "Type: message") of an exception, never a traceback."""
    if isinstance(exc, RemoteToolError):  # raised in another process: its own type, as it was named there
        short = exc.error_type.rpartition(".")[2]
        return exc.error_type, f"{short}: {exc.text}" if exc.text else short
    cls = type(exc)
    qualified = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    try:
        text = str(exc)
    except Exception:  # an exception whose __str__ raises still gets a failure
        text = ""
    return qualified, f"{cls.__name__}: {text}" if text else cls.__name__


def truncate(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with a marker saying so."""
    if len(text) <= limit:
        return text
    return cut_note(text[:limit], len(text), limit)


def cut_note(head: str, total: int, limit: int) -> str:
    """What is shown of a text of `total` characters cut to its first `limit` (`head`)."""
    return f"{head}\n[truncated: the result had {total} characters; showing the first {limit}]"


def input_failure(call: ToolCall, tool: str, exc: BaseException, max_chars: int) -> ToolFailure:
    """The failure of a call whose arguments could not be decoded (whatever decoding raised)."""
    if isinstance(exc, InvalidArguments):
        text = f"`{echo(exc.path)}`: {exc.expected}" if exc.path else exc.expected
    elif isinstance(exc, ToolRejected):  # a decode_args hook may refuse input the way a tool does
        return failure(call, FailureKind.REJECTED, truncate(exc.message, max_chars))
    elif isinstance(exc, RecursionError):
        text = "`$`: the arguments are nested too deeply"
    else:
        text = describe_error(exc)[1]
    return failure(
        call,
        FailureKind.INVALID_ARGUMENTS,
        truncate(f"invalid arguments for tool {tool!r}: {text}", max_chars),
    )


def exception_failure(call: ToolCall, tool: str, exc: BaseException, max_chars: int) -> ToolFailure:
    """The failure of a call whose tool raised `exc` while it ran."""
    if isinstance(exc, ToolRejected):
        return failure(call, FailureKind.REJECTED, truncate(exc.message, max_chars))
    if isinstance(exc, InvalidArguments):
        return input_failure(call, tool, exc, max_chars)
    if isinstance(exc, ToolUnavailable):
        message = f"tool {tool!r} is unavailable: {exc.reason}"
        return failure(call, FailureKind.UNAVAILABLE, truncate(message, max_chars))
    if isinstance(exc, ToolOverloaded):
        message = f"tool {tool!r} is overloaded: {exc.reason}"
        return failure(call, FailureKind.OVERLOADED, truncate(message, max_chars))
    error_type, text = describe_error(exc)
    return failure(call, FailureKind.ERROR, truncate(f"tool {tool!r} raised {text}", max_chars), error_type)


def success(
    call: ToolCall,
    tool: str,
    value: Any,
    text: str,
    parts: tuple[ContentPart, ...],
    max_chars: int,
) -> ToolSuccess[Any]:
    """The success of a call: its text (and text parts) cut to `max_chars`."""
    if len(text) > max_chars:
        text = truncate(text, max_chars)
    if parts:
        parts = tuple(
            msgspec.structs.replace(p, text=truncate(p.text, max_chars))
            if type(p) is TextPart and len(p.text) > max_chars
            else p
            for p in parts
        )
    return ToolSuccess(call_id=call.id, tool=tool, content=text, value=value, parts=parts)

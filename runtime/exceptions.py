"""Every exception the runtime raises on purpose, in one place.

Hierarchy::

    ToolRuntimeError                    base of everything below
    ├── InvalidArguments (ValueError)   a call's arguments did not decode into the tool's args type
    ├── ToolRejected                    a tool refused its input (raised by tools: validate / fail)
    │   └── ArtifactMissing             an artifact handle is not the caller's, or it expired
    ├── ToolUnavailable                 a tool's backend is gone (an MCP server, a worker process)
    │   ├── CannotAsk                   a tool asked (elicit, sample, roots) and no one can answer
    │   └── CallStopped                 a placement stopped a call because the engine asked it to
    ├── ToolOverloaded                  a tool (or where it runs) has more waiting than it takes
    ├── CallDeferred                    a tool deferred its call (`ctx.defer`): it ends its turn pending
    ├── CallNotFound (LookupError)      no detached call of that id for that principal
    ├── CallStateError                  a detached call's state does not allow what was asked (approve a denied one)
    ├── RemoteToolError                 a tool raised in another process (boxed: type name and message)
    ├── WorkerLost                      the process serving a call died (a signal, an exit, the OOM killer)
    ├── SchemaError (ValueError)        a JSON Schema could not be turned into the IR
    ├── ToolDefinitionError (TypeError) a function or class cannot become a tool; says what to do
    ├── ResultTypeError (TypeError)     a tool returned a value that is not its declared result type
    └── RuntimeClosed (RuntimeError)    the caller used a runtime that is closed (the caller's mistake)

    ToolRuntimeWarning (UserWarning)    base of the runtime's warnings (for the developer, never the model)
    ├── ResultTypeWarning               a tool returned a value that is not its declared result type,
    │                                   and the model read it as returned (once per tool and shape)
    └── ToolDefinitionWarning           a tool is defined with something the model will miss (no description)

Only `RuntimeClosed` ever reaches a caller of `Runtime.call`: everything a tool does
becomes a `ToolFailure`. The module sits below every layer so that each may raise these.
A warnings filter that turns `ResultTypeWarning` into an error (`-W error`, pytest's
`filterwarnings = error`) makes a mismatched result fail its call, as `strict_result=True` does.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ArtifactMissing",
    "CallDeferred",
    "CallNotFound",
    "CallStateError",
    "CallStopped",
    "CannotAsk",
    "InvalidArguments",
    "RemoteToolError",
    "ResultTypeError",
    "RuntimeClosed",
    "SchemaError",
    "ToolDefinitionError",
    "ToolOverloaded",
    "ToolRejected",
    "ToolRuntimeError",
    "ToolUnavailable",
    "WorkerLost",
    "ToolRuntimeWarning",
    "ResultTypeWarning",
    "ToolDefinitionWarning",
]


class ToolRuntimeError(Exception):
    """Base class of the runtime's own exceptions."""


class InvalidArguments(ToolRuntimeError, ValueError):
    """The arguments of a call did not decode into the tool's args type.

    Attributes:
        path: JSON path of the offending value (`$` for the whole payload, `$.limit`...).
        expected: what was expected there, in words a model can act on.
    """

    def __init__(self, expected: str, path: str = "$") -> None:
        self.expected = expected
        self.path = path
        super().__init__(f"{expected} - at `{path}`" if path != "$" else expected)


class ToolRejected(ToolRuntimeError):
    """A tool refused its input; the message is shown to the model as it is.

    Raise it (or call `validate` / `fail`) for input that is well-typed but wrong:
    a negative limit, a file outside the sandbox. It is reported as REJECTED,
    distinct from a crash (ERROR).
    """

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class ArtifactMissing(ToolRejected):
    """An artifact handle that the caller cannot read: not its principal's, expired or dropped.

    The message says which where it can tell (never whether another principal has it); raised
    from a tool, it is that call's REJECTED, which the model reads.
    """


class ToolUnavailable(ToolRuntimeError):
    """A tool cannot serve now because what it stands for is gone: reported as UNAVAILABLE.

    Raised by tools that front something remote (an MCP server whose connection dropped,
    a worker process that died); the runtime keeps serving and the model is told why.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class CannotAsk(ToolUnavailable):
    """A tool asked back (`ctx.elicit`, `ctx.sample`, `ctx.list_roots`, an approval) and no one
    can answer: no handler was given, or the MCP client did not announce the capability.
    Reported as UNAVAILABLE with the reason; a tool may catch it and go on without the answer.
    """


class CallStopped(ToolUnavailable):
    """A placement stopped a call's work because the engine asked it to (`PlacedTool.stop`):
    raised from that call's `PlacedTool.call`. The engine answers the call for the reason it
    stopped it (its caller left, shutdown, the tool's incarnation ended); should it reach a
    caller anyway, it reads as UNAVAILABLE.
    """


class ToolOverloaded(ToolRuntimeError):
    """A tool cannot take the call now: too many calls are waiting for it; reported as OVERLOADED.

    Raised where a tool runs when its own queue is full (a Ray placement past its `max_queued`
    calls per replica), or by a tool that fronts a service which says the same; the caller may
    try again later (`Retry` retries OVERLOADED by default).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class RemoteToolError(ToolRuntimeError):
    """A tool raised an exception in another process (a Subprocess worker, a Ray replica).

    The exception is boxed where it happened and rebuilt here: its qualified type name and
    its message travel, never its traceback (that is logged where it was raised).

    Attributes:
        error_type: the qualified type name of the exception (`ZeroDivisionError`, `pkg.MyError`).
        text: its message.
        restart: it is one of the tool's `restart_on` exceptions (checked where it was raised).
    """

    def __init__(self, error_type: str, text: str, *, restart: bool = False) -> None:
        self.error_type = error_type
        self.text = text
        self.restart = restart
        super().__init__(f"{error_type}: {text}" if text else error_type)


class WorkerLost(ToolRuntimeError):
    """The process serving a call died before it answered (a signal, an exit, the OOM killer).

    The call fails with ERROR naming the cause (`worker killed by SIGSEGV`); it is never retried.
    """


class SchemaError(ToolRuntimeError, ValueError):
    """A JSON Schema could not be parsed into the tool IR."""


class ToolDefinitionError(ToolRuntimeError, TypeError):
    """A function or class cannot become a tool; the message says what to change."""


class ResultTypeError(ToolRuntimeError, TypeError):
    """A tool returned a value that is not its declared result type.

    Raised where a result is turned into what goes back, never to a caller. Real code's return
    annotations are often looser than its values (`-> Dict[str, str]` returning a nested dict),
    so by default the value is given to the model as it was returned, and the mismatch goes to
    the developer (`ResultTypeWarning`, `ToolSuccess.type_mismatch`, the span, `statistics()`);
    an MCP client is then sent no `structuredContent`, which its `outputSchema` would refuse.
    With the tool's `strict_result=True` the call is ERROR, naming both.

    Attributes:
        returned: (the text the model reads, `ToolSuccess.value`) made from the value as it was
            returned, when the check is loose; None when it is strict (the call fails).
    """

    def __init__(self, message: str, *, returned: tuple[str, object] | None = None) -> None:
        super().__init__(message)
        self.returned = returned


class RuntimeClosed(ToolRuntimeError, RuntimeError):
    """The runtime is closed (or not yet open); no call can be made on it."""


class ToolRuntimeWarning(UserWarning):
    """Base class of the runtime's warnings: what a developer should fix, never what a model reads."""


class ResultTypeWarning(ToolRuntimeWarning):
    """A tool returned a value that is not its declared result type; the model read it as returned.

    Issued once per tool and shape of mismatch. Fix the annotation (or the value), or declare the
    tool `strict_result=True` to fail such calls; a warnings filter of "error" for this class
    fails them everywhere.
    """


class ToolDefinitionWarning(ToolRuntimeWarning):
    """A tool was defined with something the model will miss (no description): it works, but the
    model is told less than it needs. Issued once per tool, where it is defined."""


class CallDeferred(ToolRuntimeError):
    """Raised by `ctx.defer(...)` once the call is journaled: the call ends its turn with its
    `ToolPending` (`pending`), or with the failure that kept it from being deferred."""

    def __init__(self, pending: Any) -> None:
        self.pending = pending
        super().__init__(getattr(pending, "message", "the call was deferred"))


class CallNotFound(ToolRuntimeError, LookupError):
    """No detached call of that id for that principal: it never existed, it belongs to another
    principal, or it ended longer ago than its ttl. The message is the same for each (no one
    learns whether another principal has such a call)."""

    def __init__(self, detached_id: object) -> None:
        self.detached_id = detached_id
        shown = detached_id if isinstance(detached_id, str) and len(detached_id) <= 128 else "..."
        super().__init__(f"no detached call {shown!r} for this principal")


class CallStateError(ToolRuntimeError):
    """What was asked of a detached call does not fit its state (approving one that was denied,
    expired, cancelled or finished; answering one that asks nothing; supplying the result of one
    that does not wait for it). Nothing changed; `status` is the call as it is."""

    def __init__(self, message: str, status: Any = None) -> None:
        self.status = status
        super().__init__(message)

"""Tool options: one frozen, validated type for `@tool(...)`, class attributes and MCP tools.

A tool declares its options where it is written (keywords of `@tool`, attributes of a tool
class); the engine reads them once, as a `ToolOptions`, when it starts the tool's actor.
Each field is declared once, on `ToolOptions`, with its constraint as msgspec `Meta`; `build`
validates every value through `msgspec.convert`, so a bad option is a `ToolDefinitionError`
that names the tool and the option, never a surprise in the middle of a call.
`ToolOptionsKw` is the same fields as typed keywords for `@tool(...)` (a test keeps the two equal).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypedDict

import msgspec

from ..exceptions import ToolDefinitionError
from ._placement import Placement
from ._resilience import Cache, CircuitBreaker, Dedupe, RateLimit, Retry

__all__ = ["Loop", "OnFull", "TaskSupport", "ToolOptions", "ToolOptionsKw", "task_support"]

OnFull = Literal["wait", "reject"]
Loop = Literal["trio", "asyncio", "any"]
TaskSupport = bool | Literal["optional", "required"]
TaskFrom = Literal["start", "background"]
Seconds = Annotated[float, msgspec.Meta(gt=0)]
Count = Annotated[int, msgspec.Meta(ge=1)]
if TYPE_CHECKING:
    Approval = bool | Callable[[Any], bool]
else:  # msgspec cannot express "a bool or a callable": `__post_init__` checks it
    Approval = Any


class ToolOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
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
        in_caller: an `async def` tool whose code stops at once when cancelled (it neither
            shields itself nor waits on a thread that cannot be abandoned) says so: a trio
            caller's `rt.call` with a free slot then runs it in the caller's own task, with no
            worker task (a parked call weighs about 1.7 KB less, and there is no hop). Its
            deadline and its caller's cancellation stop it as usual; code that ignores them
            would hold its caller until it ends, which is why it is not the default (a worker
            task's caller is answered a grace after the deadline whatever the code does).
        requires_approval: ask before each call runs (True), or before the calls whose decoded
            arguments a predicate `(args) -> bool` picks; the question goes through the same path
            as `ctx.elicit` (the `on_elicit` handler, or the MCP client). Denied: REJECTED with
            the reason, and the tool does not run.
        task: its calls may run as MCP tasks (SEP-2663, `io.modelcontextprotocol/tasks`): True or
            "optional" (a served call from a client that declared the tasks extension becomes a
            detached call, answered at once with its task; other clients are answered as usual),
            "required" (only as a task: a client without the extension gets -32021), False (never;
            a `requires_approval` tool is still served as "optional": its call may wait). Long
            calls (minutes) and calls that wait for people are the ones to mark.
        task_from: where such a call becomes its task: "start" (at once: its questions are the
            task's, answered with `tasks/update`), or "background" (it starts in the request,
            whose questions go to the client as input-required rounds, and becomes a task where
            its code calls `await ctx.background()`: run again from the start as a detached call,
            the answers given so far answering its questions; a call that ends first is answered
            as usual). Only with `task`.
        tags: labels a per-request view selects tools by (`rt.scoped(tags=...)`).
        policies: the tool's own interceptors (`runtime.Policy`), inside the runtime's.
        idempotent: running a call twice does what running it once does (an MCP tool's
            `idempotentHint`): it may be retried and hedged.
        read_only: it changes nothing (an MCP tool's `readOnlyHint`; implies idempotent): its
            results may be cached.
        retry: run a failed call again (`Retry`; idempotent tools only).
        cache: answer from an earlier result of the same call (`Cache`; read-only tools only).
        dedupe: identical calls run once, and a replay gets the stored result (`Dedupe`).
        rate_limit: calls a second this tool takes, from everyone (`RateLimit`).
        breaker: stop calling it while it cannot be reached (`CircuitBreaker`).
        max_result_chars: its own limit on each text that goes back (None: the runtime's
            `max_result_chars`); a longer one is cut, or kept whole as an artifact when the
            runtime keeps them (`open_runtime(artifacts=...)`).
        strict_result: a result that is not of the declared return type fails the call (ERROR
            naming both). By default the model reads such a value as it was returned, and the
            mismatch is reported to the developer: a `ResultTypeWarning` once per shape of
            mismatch, `ToolSuccess.type_mismatch`, the span, `statistics()`.
    """

    timeout: Seconds | None = None
    max_concurrency: Count | None = None
    mailbox_size: Count = 1024
    on_full: OnFull = "wait"
    inline: bool = False
    restart_on: tuple[type[BaseException], ...] = ()
    setup_timeout: Seconds | None = 30.0
    placement: Placement | None = None
    loop: Loop = "trio"
    in_caller: bool = False
    requires_approval: Approval = False
    task: TaskSupport = False
    task_from: TaskFrom = "start"
    tags: frozenset[str] = frozenset()
    policies: tuple[Any, ...] = ()
    idempotent: bool = False
    read_only: bool = False
    retry: Retry | None = None
    cache: Cache | None = None
    dedupe: Dedupe | None = None
    rate_limit: RateLimit | None = None
    breaker: CircuitBreaker | None = None
    max_result_chars: Count | None = None
    strict_result: bool = False

    def __post_init__(self) -> None:
        # The checks msgspec's constraints cannot make; `build` words them (its `_why`).
        approval = self.requires_approval
        if not isinstance(approval, bool) and not callable(approval):
            raise ValueError("requires_approval")
        if not all(callable(getattr(p, "intercept", None)) for p in self.policies):
            raise ValueError("policies")
        if self.inline and self.timeout is not None:
            raise ValueError("inline+timeout")
        if self.retry is not None and not (self.idempotent or self.read_only):
            raise ValueError("retry+idempotent")
        if self.cache is not None and not self.read_only:
            raise ValueError("cache+read_only")
        if self.task_from != "start" and self.task is False:
            raise ValueError("task_from+task")

    @property
    def task_support(self) -> Literal["forbidden", "optional", "required"]:
        """How MCP serves its calls as tasks (`execution.taskSupport`): see `task`."""
        return task_support(self.task, self.requires_approval)

    @property
    def repeatable(self) -> bool:
        """Running a call twice is safe (idempotent, or read-only)."""
        return self.idempotent or self.read_only

    @classmethod
    def build(cls, what: str, values: Any) -> ToolOptions:
        """Options from `values` (a mapping, or an object whose attributes are the options).

        Raises:
            ToolDefinitionError: a value the runtime cannot honour; the message starts with `what`.
        """
        if isinstance(values, dict):
            unknown = sorted(set(values) - set(_FIELDS))
            if unknown:
                close = difflib.get_close_matches(unknown[0], _FIELDS, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ToolDefinitionError(
                    f"{what}: unknown option {unknown[0]!r}; {hint}the options are: {', '.join(_FIELDS)}"
                )
            fields = dict(values)
            for name in ("restart_on", "policies"):  # any iterable, as a keyword
                if isinstance(fields.get(name), list | set | frozenset):
                    fields[name] = tuple(fields[name])
            if isinstance(fields.get("tags"), list | tuple | set):
                fields["tags"] = frozenset(fields["tags"])
        else:
            fields = {name: getattr(values, name) for name in _FIELDS if hasattr(values, name)}
        try:
            return msgspec.convert(fields, cls, dec_hook=_objects)
        except (msgspec.ValidationError, ValueError) as exc:
            raise ToolDefinitionError(f"{what}: {_why(fields, exc)}") from None


_FIELDS: tuple[str, ...] = ToolOptions.__struct_fields__

_EXPECTED = {
    "timeout": "a positive number of seconds or None",
    "setup_timeout": "a positive number of seconds or None",
    "max_concurrency": "a positive int or None",
    "mailbox_size": "a positive int",
    "on_full": "'wait' or 'reject'",
    "inline": "True or False",
    "restart_on": "a tuple of exception classes",
    "placement": "InProcess(), Subprocess(...) or Ray(...) (from runtime.placement)",
    "loop": "'trio', 'asyncio' or 'any'",
    "requires_approval": "True, False or a predicate (args) -> bool",
    "task": "True, False, 'optional' or 'required'",
    "task_from": "'start' or 'background'",
    "tags": "a set of strings",
    "policies": "a sequence of runtime.Policy instances",
    "idempotent": "True or False",
    "read_only": "True or False",
    "retry": "a runtime.Retry(...) or None",
    "cache": "a runtime.Cache(...) or None",
    "dedupe": "a runtime.Dedupe(...) or None",
    "rate_limit": "a runtime.RateLimit(...) or None",
    "breaker": "a runtime.CircuitBreaker(...) or None",
    "max_result_chars": "a positive int or None",
    "strict_result": "True or False",
}


def _objects(kind: Any, value: Any) -> Any:
    """msgspec's hook for the fields it cannot check itself: classes, placements, predicates."""
    if getattr(kind, "__origin__", None) is type:  # type[BaseException]
        if isinstance(value, type) and issubclass(value, kind.__args__[0]):
            return value
    elif kind is Placement or kind in _VALUES:
        if isinstance(value, kind):
            return value
    elif callable(value):  # Callable[[Any], bool]
        return value
    raise TypeError(f"Expected `{kind}`")  # msgspec adds where: `$.restart_on[1]`


_VALUES = (Retry, Cache, Dedupe, RateLimit, CircuitBreaker)


def _why(fields: dict[str, Any], exc: Exception) -> str:
    """The sentence for a value msgspec refused: the option, what it must be, what it was."""
    text = str(exc)
    if "retry+idempotent" in text:
        return (
            "retry= runs a call again, which only an idempotent tool allows: say idempotent=True "
            "(or read_only=True) if running it twice does what running it once does, or drop retry="
        )
    if "cache+read_only" in text:
        return (
            "cache= serves an earlier result instead of running the tool, which only a read-only "
            "tool allows: say read_only=True if it changes nothing, or drop cache="
        )
    if "task_from+task" in text:
        return (
            f"task_from={fields.get('task_from')!r} says where a call becomes its MCP task, and this "
            "tool's calls are never tasks: say task=True (or 'required'), or drop task_from="
        )
    if "inline+timeout" in text:
        return (
            f"an inline tool runs on the event loop and cannot be interrupted, so its "
            f"timeout={fields.get('timeout')!r} could not be honoured; drop inline=True (it then runs "
            "in a worker thread, where a timeout works) or drop the timeout"
        )
    at = text.rpartition("at `$.")[2]
    name = at.split("`", 1)[0].split(".", 1)[0].split("[", 1)[0]
    if "requires_approval" in text:
        name = "requires_approval"
    elif text.startswith("policies"):
        name = "policies"
    if name in _EXPECTED:
        return f"{name} must be {_EXPECTED[name]}, not {fields.get(name)!r}"
    return text  # pragma: no cover - every field has its sentence


class ToolOptionsKw(TypedDict, total=False):
    """The options as keywords of `@tool(...)` (see `ToolOptions` for each)."""

    timeout: float | None
    max_concurrency: int | None
    mailbox_size: int
    on_full: OnFull
    inline: bool
    restart_on: tuple[type[BaseException], ...] | list[type[BaseException]]
    setup_timeout: float | None
    placement: Placement | None
    loop: Loop
    in_caller: bool
    requires_approval: bool | Callable[[Any], bool]
    task: TaskSupport
    task_from: TaskFrom
    tags: frozenset[str] | set[str] | list[str] | tuple[str, ...]
    policies: tuple[Any, ...] | list[Any]
    idempotent: bool
    read_only: bool
    retry: Retry | None
    cache: Cache | None
    dedupe: Dedupe | None
    rate_limit: RateLimit | None
    breaker: CircuitBreaker | None
    max_result_chars: int | None
    strict_result: bool


def task_support(task: Any, requires_approval: Any = False) -> Literal["forbidden", "optional", "required"]:
    """`execution.taskSupport` of a tool with these options: "required", "optional" (`task` True or
    "optional", or a tool whose calls may wait for an approval), else "forbidden"."""
    if task == "required":
        return "required"
    if task is True or task == "optional" or requires_approval is not False:
        return "optional"
    return "forbidden"

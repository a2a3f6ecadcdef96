"""What a tool (or the whole runtime) asks of the resilience policies: plain, validated values.

The engine implements each one on the call path (`runtime.engine._resilience`); a tool names
them as options (`@tool(idempotent=True, retry=Retry())`), a runtime as defaults
(`open_runtime(retry=Retry(), breaker=CircuitBreaker(), budget=Budget(per_principal=8))`).
All of them are off unless asked for.

Each value is checked against its field's type and constraints (msgspec `Meta`) when it is made,
by its constructor as by `msgspec.structs.replace` (msgspec checks constraints only when it
decodes): a bad one is a `ToolDefinitionError` naming the type, the field and the value, never a
surprise mid-call. Every number is finite: a TTL of `inf` or a wait of `nan` is refused there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

import msgspec

from ..exceptions import RemoteToolError, ToolDefinitionError
from ..messages import FailureKind

__all__ = [
    "MAX_SECONDS",
    "Budget",
    "Cache",
    "CircuitBreaker",
    "Dedupe",
    "RateLimit",
    "Retry",
    "RetryOn",
    "check_fields",
]

log = logging.getLogger("runtime.tools")

MAX_SECONDS = 1e9
"""The longest time any option may name (about 31 years): finite, so every store can keep it."""

Positive = Annotated[float, msgspec.Meta(gt=0, le=MAX_SECONDS)]
Seconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_SECONDS)]
Count = Annotated[int, msgspec.Meta(ge=1)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]
Rate = Annotated[float, msgspec.Meta(ge=1e-6, le=1e9)]
"""Calls a second: at least one in about eleven days, at most a billion."""
Burst = Annotated[float, msgspec.Meta(ge=1, le=1e9)]
"""Calls at once: at least one (a bucket that never holds a whole call admits none, ever)."""

NEVER_RETRIED = frozenset(
    {FailureKind.INVALID_ARGUMENTS, FailureKind.REJECTED, FailureKind.UNKNOWN_TOOL, FailureKind.CANCELLED}
)
"""Failures another attempt cannot change (or that the caller asked for): never retried."""

TRANSPORT = frozenset({FailureKind.UNAVAILABLE, FailureKind.TIMEOUT})
"""Failures that say the tool could not be reached or did not answer in time, not that its
code refused: what retries act on by default, and the only thing that opens a breaker."""

RetryOn: TypeAlias = "FailureKind | str | type[BaseException] | Callable[[BaseException], bool]"
"""One thing `Retry(on=...)` names: a failure kind (or its value, "timeout"), an exception type
(its subclasses too), or a predicate given the exception the tool raised."""

_checked: dict[type, tuple[tuple[str, Any], ...]] = {}  # a value type -> (field, its type) to check


def check_fields(value: msgspec.Struct, skip: tuple[str, ...] = ()) -> None:
    """Check each field of `value` against its declared type and constraints, as msgspec does
    when it decodes (it does not when a struct is made in code).

    Raises:
        ToolDefinitionError: a field's value is not what its type allows; the message names the
            type, the field, the value and what was expected.
    """
    cls = type(value)
    fields = _checked.get(cls)
    if fields is None:
        fields = _checked[cls] = tuple(
            (f.name, f.type) for f in msgspec.structs.fields(cls) if f.name not in skip
        )
    for name, kind in fields:
        given = getattr(value, name)
        try:
            msgspec.convert(given, kind)
        except msgspec.ValidationError as exc:
            expected = str(exc).removeprefix("Expected ").split(" - at ", 1)[0]
            raise ToolDefinitionError(
                f"{cls.__name__}: {name}={given!r} is not allowed; expected {expected}"
            ) from None


class _Value(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    def __post_init__(self) -> None:
        check_fields(self)


class Retry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Run an idempotent tool's call again when it failed in a way another attempt may fix.

    Attempts run within the call's deadline (the caller's, or the runtime's default): one whose
    backoff would end past it is not made, and the model reads the last failure. The caller
    sees one result; each attempt is a span event (`tool.retry`) with its outcome.

    Attributes:
        attempts: attempts in all (the first call included).
        backoff: seconds before the second attempt; doubles for each further one.
        max_backoff: the longest wait between attempts.
        jitter: the fraction of each wait that is random (0: none; 1: anywhere from 0 to it).
        on: what is retried, one or several of: failure kinds (`"timeout"`,
            `FailureKind.UNAVAILABLE`; ERROR only if named: a tool's own exception is usually its
            answer), exception types (`ConnectionError`: the tool raised one, or a subclass; in
            another process, its type's qualified name), and predicates given the exception the
            tool raised (`lambda exc: ...`; one that raises counts as no). Never
            INVALID_ARGUMENTS, REJECTED, UNKNOWN_TOOL or CANCELLED, whatever raised them.
            Default: TIMEOUT, UNAVAILABLE and OVERLOADED.
    """

    attempts: Annotated[int, msgspec.Meta(ge=2)] = 3
    backoff: Seconds = 0.2
    max_backoff: Seconds = 5.0
    jitter: Fraction = 0.5
    if TYPE_CHECKING:
        on: frozenset[RetryOn] | RetryOn | Iterable[RetryOn] = frozenset()
    else:  # kinds, classes and callables: normalised and checked by `__post_init__`
        on: Any = frozenset({*TRANSPORT, FailureKind.OVERLOADED})

    def __post_init__(self) -> None:
        check_fields(self, skip=("on",))
        given: Any = self.on
        if isinstance(given, str | type) or (callable(given) and not isinstance(given, Iterable)):
            given = (given,)  # one of them, not a collection
        try:
            items = list(given)
        except TypeError:
            items = [given]
        on: set[Any] = set()
        for item in items:
            if isinstance(item, type):
                if not issubclass(item, BaseException):
                    raise ToolDefinitionError(
                        f"Retry: on={self.on!r}: {item.__name__} is not an exception type"
                    )
                on.add(item)
            elif isinstance(item, str):
                try:
                    on.add(FailureKind(item))  # "timeout" or FailureKind.TIMEOUT
                except ValueError:
                    kinds = ", ".join(k.value for k in FailureKind)
                    raise ToolDefinitionError(
                        f"Retry: on={self.on!r}: {item!r} is not a failure kind ({kinds})"
                    ) from None
            elif callable(item):
                on.add(item)
            else:
                raise ToolDefinitionError(
                    f"Retry: on={self.on!r}: {item!r} is neither a failure kind, an exception type "
                    "nor a predicate"
                )
        never = sorted(kind.value for kind in on if isinstance(kind, FailureKind) and kind in NEVER_RETRIED)
        if never:
            raise ToolDefinitionError(
                f"Retry: on={self.on!r} cannot retry {', '.join(never)}: another attempt changes nothing"
            )
        msgspec.structs.force_setattr(self, "on", frozenset(on))

    def retries(self, kind: FailureKind, error: BaseException | None = None) -> bool:
        """Whether a failure of `kind`, raised by `error` (None: no exception, e.g. a timeout),
        is one this Retry tries again (attempts aside)."""
        if kind in NEVER_RETRIED:
            return False
        on: frozenset[Any] = self.on  # type: ignore[assignment]  # normalised by __post_init__
        if kind in on:
            return True
        if error is None:
            return False
        for item in on:
            if isinstance(item, type):
                if isinstance(error, item) or (
                    isinstance(error, RemoteToolError) and error.error_type == _qualified(item)
                ):
                    return True
            elif not isinstance(item, FailureKind):
                try:
                    if item(error):
                        return True
                except Exception:  # its bug: no retry, and the call's failure stands
                    log.warning("Retry(on=%r) raised on %r; not retried", item, error, exc_info=True)
        return False

    def delay(self, attempt: int, random: float) -> float:
        """The wait before attempt `attempt` (2: the first retry), `random` in [0, 1)."""
        full = min(self.max_backoff, self.backoff * 2 ** max(0, attempt - 2))
        return float(full * (1 - self.jitter * random))


def _qualified(cls: type) -> str:
    """A class's name as a boxed remote error carries it (`RemoteToolError.error_type`)."""
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


class Cache(_Value, frozen=True):
    """Answer a read-only tool's call from an earlier result of the same call.

    The key is the tool, its canonical arguments and the principal (unless `shared`): one
    principal never reads another's results. A caller's idempotency key is not part of it (it
    names an operation to run once, `Dedupe`'s, not what a result answers). Only successes are
    kept.

    Attributes:
        ttl: seconds a result is served.
        max_entries: results kept per tool in this process (room is made in the principal
            that wrote the most, its least recently used first: one principal's calls never
            evict another's results).
        shared: one cache for every principal (results that do not depend on who asks).
    """

    ttl: Positive = 60.0
    max_entries: Count = 1024
    shared: bool = False


class Dedupe(_Value, frozen=True):
    """Identical calls run once: concurrent ones share the one execution, and a replay of a
    finished call within `ttl` gets its stored result without running the tool again. The
    execution goes on while any of them waits for it (the first caller giving up does not stop
    it); it is cancelled once they have all left.

    The key is the tool, its canonical arguments and the principal, or the caller's own
    (metadata `idempotency_key`, which MCP clients send in `_meta`). With a persistent store
    (`SQLiteStore`, `RedisStore`) the journal survives a restart and is shared by processes.

    Attributes:
        ttl: seconds a finished result answers a replay (0: only calls in flight are joined).
        claim: seconds a call in flight holds its key for other processes (it is released when
            it ends; a process that died holding it is waited for at most this long).
    """

    ttl: Seconds = 300.0
    claim: Positive = 30.0


class RateLimit(_Value, frozen=True):
    """A token bucket: `rate` calls a second, bursts of up to `burst`.

    Attributes:
        rate: calls per second, sustained.
        burst: calls at once after a quiet spell (None: max(1, rate)).
        wait: over the limit a call waits for its token (within its deadline) instead of
            failing OVERLOADED at once with the seconds to wait.
    """

    rate: Rate
    burst: Burst | None = None
    wait: bool = False

    @property
    def capacity(self) -> float:
        return self.burst if self.burst is not None else max(1.0, self.rate)


class Budget(_Value, frozen=True):
    """Caps on what callers may run at once: the runtime's answer to a turn of 800 calls.

    Attributes:
        per_batch: calls of one batch running at once (the others wait their turn): a
            `call_many` / `as_completed`, or one code-mode program's calls (a batch is one
            model turn).
        per_principal: calls of one principal running at once, over every tool.
        rate: calls per second of one principal (shared by processes on a `RedisStore`).
        wait: over `per_principal` a call waits for room (within its deadline) instead of
            failing OVERLOADED at once.
    """

    per_batch: Count | None = None
    per_principal: Count | None = None
    rate: RateLimit | None = None
    wait: bool = False


class CircuitBreaker(_Value, frozen=True):
    """Stop calling a tool (or an MCP server) that cannot be reached, for a while.

    Opened by `failures` transport failures (UNAVAILABLE, TIMEOUT: a server down, a connection
    refused, no answer in time) within `window` seconds, never by a tool's own ERROR, REJECTED
    or an MCP `isError`. A TIMEOUT counts only when the tool's own timeout passed (its
    `timeout`, or the runtime's `default_timeout`), never a caller's shorter deadline: one
    principal's impatient calls do not open it for everyone. Nor do the calls lost to a restart
    that the tool's own `restart_on` exception caused (one principal's input that crashes the
    tool); a worker that died, a connection lost, still count. While open, calls fail
    UNAVAILABLE at once with the seconds until it is
    tried again; then one call goes through (half-open): its success closes the breaker, its
    transport failure opens it again.

    Attributes:
        failures: transport failures within `window` that open it.
        window: seconds over which failures are counted.
        cool_down: seconds it stays open before a probe call.
    """

    failures: Count = 5
    window: Positive = 30.0
    cool_down: Positive = 30.0

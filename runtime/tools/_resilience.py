"""What a tool (or the whole runtime) asks of the resilience policies: plain, validated values.

The engine implements each one on the call path (`runtime.engine._resilience`); a tool names
them as options (`@tool(idempotent=True, retry=Retry())`), a runtime as defaults
(`open_runtime(retry=Retry(), breaker=CircuitBreaker(), budget=Budget(per_principal=8))`).
All of them are off unless asked for.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ..messages import FailureKind

__all__ = ["Budget", "Cache", "CircuitBreaker", "Dedupe", "RateLimit", "Retry"]

Positive = Annotated[float, msgspec.Meta(gt=0)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]
Count = Annotated[int, msgspec.Meta(ge=1)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]

NEVER_RETRIED = frozenset(
    {FailureKind.INVALID_ARGUMENTS, FailureKind.REJECTED, FailureKind.UNKNOWN_TOOL, FailureKind.CANCELLED}
)
"""Failures another attempt cannot change (or that the caller asked for): never retried."""

TRANSPORT = frozenset({FailureKind.UNAVAILABLE, FailureKind.TIMEOUT})
"""Failures that say the tool could not be reached or did not answer in time, not that its
code refused: what retries act on by default, and the only thing that opens a breaker."""


class _Value(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class Retry(_Value, frozen=True):
    """Run an idempotent tool's call again when it failed in a way another attempt may fix.

    Attempts run within the call's deadline (the caller's, or the runtime's default): one whose
    backoff would end past it is not made, and the model reads the last failure. The caller
    sees one result; each attempt is a span event (`tool.retry`) with its outcome.

    Attributes:
        attempts: attempts in all (the first call included).
        backoff: seconds before the second attempt; doubles for each further one.
        max_backoff: the longest wait between attempts.
        jitter: the fraction of each wait that is random (0: none; 1: anywhere from 0 to it).
        on: the failure kinds retried (never INVALID_ARGUMENTS, REJECTED, UNKNOWN_TOOL or
            CANCELLED; ERROR only if named: a tool's own exception is usually its answer).
    """

    attempts: Annotated[int, msgspec.Meta(ge=2)] = 3
    backoff: Seconds = 0.2
    max_backoff: Seconds = 5.0
    jitter: Fraction = 0.5
    on: frozenset[FailureKind] = frozenset({*TRANSPORT, FailureKind.OVERLOADED})

    def __post_init__(self) -> None:
        kinds = frozenset(FailureKind(kind) for kind in self.on)  # "timeout" or FailureKind.TIMEOUT
        msgspec.structs.force_setattr(self, "on", kinds)
        never = sorted(kind.value for kind in self.on & NEVER_RETRIED)
        if never:
            raise ValueError(
                f"Retry(on=...) cannot retry {', '.join(never)}: another attempt changes nothing"
            )

    def delay(self, attempt: int, random: float) -> float:
        """The wait before attempt `attempt` (2: the first retry), `random` in [0, 1)."""
        full = min(self.max_backoff, self.backoff * 2 ** max(0, attempt - 2))
        return float(full * (1 - self.jitter * random))


class Cache(_Value, frozen=True):
    """Answer a read-only tool's call from an earlier result of the same call.

    The key is the tool, its canonical arguments and the principal (unless `shared`): one
    principal never reads another's results. Only successes are kept.

    Attributes:
        ttl: seconds a result is served.
        max_entries: results kept per tool (the least recently used go first).
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

    rate: Positive
    burst: Positive | None = None
    wait: bool = False

    @property
    def capacity(self) -> float:
        return self.burst if self.burst is not None else max(1.0, self.rate)


class Budget(_Value, frozen=True):
    """Caps on what callers may run at once: the runtime's answer to a turn of 800 calls.

    Attributes:
        per_batch: calls of one `call_many` / `as_completed` running at once (the others wait
            their turn; a batch is one model turn).
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
    or an MCP `isError`. While open, calls fail UNAVAILABLE at once with the seconds until it is
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

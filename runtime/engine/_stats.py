"""Counters: what each tool's actor counts, and the immutable snapshots `statistics()` returns."""

from __future__ import annotations

import collections
from typing import Any

import msgspec

from ..messages import ToolFailure, ToolResult, ToolSuccess
from ..tools import PlacementStatistics

__all__ = ["RuntimeStatistics", "ToolCounters", "ToolStatistics"]


class ToolCounters:
    """One tool's live counters, updated on the trio thread (no locks needed).

    Attributes:
        calls: calls answered.
        succeeded: calls that returned.
        failures: failed calls by FailureKind value.
        in_flight: calls a worker is serving now.
        restarts: times the actor was restarted.
        orphans: calls answered from outside their worker (a lapsed deadline, a cancelled
            caller, shutdown) while the worker still runs them, with the time from which they
            count as abandoned (when they were answered, plus a grace if they were only cancelled).
        abandoned_late: orphans whose work ended more than a grace after they were answered.
        retries: attempts made again (`Retry`).
        type_mismatches: results that were not of the tool's declared result type.
    """

    __slots__ = (
        "abandoned_late",
        "calls",
        "failures",
        "in_flight",
        "orphans",
        "restarts",
        "retries",
        "succeeded",
        "type_mismatches",
    )

    def __init__(self) -> None:
        self.calls = 0
        self.succeeded = 0
        self.failures: collections.Counter[str] = collections.Counter()
        self.in_flight = 0
        self.restarts = 0
        self.orphans: dict[object, float] = {}
        self.abandoned_late = 0
        self.retries = 0
        self.type_mismatches = 0

    def stuck_orphans(self, now: float) -> int:
        """Orphans that count as abandoned by `now`."""
        return sum(1 for since in self.orphans.values() if now >= since)

    def record(self, result: ToolResult) -> None:
        """Count a finished call."""
        self.calls += 1
        if type(result) is ToolSuccess:
            self.succeeded += 1
        else:
            self.record_failure(result)  # type: ignore[arg-type]  # not a success: a failure

    def record_failure(self, failure: ToolFailure) -> None:
        """Count a failure's kind (the caller counts the call itself)."""
        self.failures[failure.kind.value] += 1


class ToolStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of one tool (a snapshot).

    Attributes:
        calls: calls answered.
        succeeded: calls that returned.
        failures: failed calls by FailureKind value.
        in_flight: calls running now.
        queued: calls waiting in the mailbox now.
        restarts: times the actor was restarted.
        state: "starting", "up", "restarting", "down" or "stopped".
        abandoned: calls answered while their work could not be stopped (it ignored
            cancellation, or its thread was blocked); see `abandoned_running`.
        abandoned_running: abandoned work still running now (a stuck thread, a shielded task).
        threads: worker threads this tool holds now (sync tools), abandoned ones included.
        down_reason: why the tool is down, if it is.
        retries: attempts made again (`Retry`).
        cache_hits, cache_misses: calls answered from its `Cache`, and calls that ran.
        replayed: calls answered from the replay journal (`Dedupe`) without running.
        joined: calls that shared an identical call's execution (`Dedupe`).
        breaker: its circuit breaker's state ("closed", "open", "half_open"), if it has one.
        placement: what a placed tool's workers are doing (Subprocess, Ray), while it serves.
        type_mismatches: results that were not of the tool's declared result type: the model
            read them as returned (`ToolSuccess.type_mismatch` says why), or, for a tool declared
            `strict_result=True`, they failed their call (ERROR).
    """

    calls: int
    succeeded: int
    failures: dict[str, int]
    in_flight: int
    queued: int
    restarts: int
    state: str
    abandoned: int = 0
    abandoned_running: int = 0
    threads: int = 0
    down_reason: str | None = None
    retries: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    replayed: int = 0
    joined: int = 0
    breaker: str | None = None
    placement: PlacementStatistics | None = None
    type_mismatches: int = 0


class RuntimeStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of a runtime (a snapshot): per tool, and calls to tools it does not have.

    Attributes:
        store_failures: steps its store (`runtime.stores`) could not do, answered from memory.
        store_degraded: the store is failing now (the policies run on memory meanwhile).
    """

    tools: dict[str, ToolStatistics]
    unknown_tool_calls: int
    store_failures: int = 0
    store_degraded: bool = False

    @property
    def in_flight(self) -> int:
        return sum(t.in_flight for t in self.tools.values())

    @property
    def abandoned_running(self) -> int:
        return sum(t.abandoned_running for t in self.tools.values())

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-serialisable dict of the snapshot (for a health endpoint or a log line)."""
        result: dict[str, Any] = msgspec.to_builtins(self)
        return result

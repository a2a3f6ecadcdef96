"""Restart intensity (OTP): how many restarts one actor may have within a period, and the backoff.

One window per tool actor counts every restart it pays for: a crash of the tool's own code
(a `restart_on` exception), a failed `setup()`, and the death of one of its placed workers or
replicas. Past `max_restarts` within `within` seconds the tool is down; after its cool-down it
is tried again with a fresh window (`ToolActor.supervise`).
"""

from __future__ import annotations

import collections

import trio

from ._options import RestartPolicy

__all__ = ["RestartWindow"]


class RestartWindow:
    """The recent restarts of one actor."""

    __slots__ = ("_recent", "policy")

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._recent: collections.deque[float] = collections.deque()

    def record(self) -> float | None:
        """Count a restart now: the backoff before it, or None if this one is over the intensity."""
        now = trio.current_time()
        recent = self._recent
        recent.append(now)
        while recent and recent[0] < now - self.policy.within:
            recent.popleft()
        if len(recent) > self.policy.max_restarts:
            return None
        return self.policy.delay(len(recent))

    def clear(self) -> None:
        """Forget the restarts (a tool that was down starts again with a fresh window)."""
        self._recent.clear()

    @property
    def recent(self) -> int:
        """Restarts within the period (as of the last `record`)."""
        return len(self._recent)
